"""Integrations for real: transformers Trainer, TRL GRPOTrainer, verl JSONL and Tracking, CLI."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import rlguard
from rlguard.integrations.verl import (
    JsonlFollower,
    RolloutDirFollower,
    patch_tracking,
    run_config,
)
from tests.hook.hookutil import (
    ServiceProcess,
    alert_lines,
    api,
    child_env,
    free_port,
    stored_series,
)

FAST = {"gpu": False, "flush_interval_s": 0.05}


def tiny_model_dir(tmp_path: Path) -> Path:
    """A 2-layer random GPT-2 and a WordLevel tokenizer, saved locally (no downloads)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    words = ["<pad>", "<eos>", "<unk>", *["a", "b", "c", "d", "e", "f", "g", "h"]]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )
    config = GPT2Config(
        vocab_size=len(words),
        n_positions=64,
        n_embd=16,
        n_layer=2,
        n_head=2,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=1,
    )
    folder = tmp_path / "tiny"
    GPT2LMHeadModel(config).save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("WANDB_DISABLED", "true")


def test_transformers_trainer_callback_logs_each_step(
    service: ServiceProcess, run_id: str, spool_dir: Path, tmp_path: Path, offline: None
) -> None:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    from rlguard.integrations.transformers import RLGuardCallback

    folder = tiny_model_dir(tmp_path)
    data = Dataset.from_dict({"input_ids": [[3, 4, 5, 6]] * 8, "labels": [[3, 4, 5, 6]] * 8})
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=4,
        logging_steps=1,
        per_device_train_batch_size=2,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
    )
    callback = RLGuardCallback(
        project="hook", run_id=run_id, url=service.url, spool_dir=str(spool_dir), **FAST
    )
    trainer = Trainer(
        model=AutoModelForCausalLM.from_pretrained(folder),
        args=args,
        train_dataset=data,
        callbacks=[callback],
    )
    trainer.train()
    stored = stored_series(service.url, run_id)
    assert sorted(stored["loss"]) == [1, 2, 3, 4]
    assert "train_runtime" not in stored
    assert api(service.url, "GET", f"/runs/{run_id}")["status"] == "finished"


def test_trl_grpo_trainer_callback_logs_trl_keys(
    service: ServiceProcess, run_id: str, spool_dir: Path, tmp_path: Path, offline: None
) -> None:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rlguard.integrations.transformers import RLGuardCallback

    folder = tiny_model_dir(tmp_path)
    prompts = Dataset.from_dict({"prompt": ["a b", "c d", "e f", "g h"] * 2})

    def reward_len(completions: list[str], **kwargs: object) -> list[float]:
        return [float(len(c)) for c in completions]

    args = GRPOConfig(
        output_dir=str(tmp_path / "grpo"),
        max_steps=3,
        logging_steps=1,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=4,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        beta=0.04,
        eval_strategy="steps",
        eval_steps=3,
        per_device_eval_batch_size=4,
    )
    trainer = GRPOTrainer(
        model=str(folder),
        reward_funcs=reward_len,
        args=args,
        train_dataset=prompts,
        eval_dataset=Dataset.from_dict({"prompt": ["h g", "f e"]}),
        processing_class=None,
    )
    RLGuardCallback.attach(
        trainer, project="hook", run_id=run_id, url=service.url, spool_dir=str(spool_dir), **FAST
    )
    trainer.train()
    stored = stored_series(service.url, run_id)
    for key in ("reward", "reward_std", "kl", "completions/mean_length", "frac_reward_zero_std"):
        assert sorted(stored[key]) == [1, 2, 3], key
    config = api(service.url, "GET", f"/runs/{run_id}")["config"]
    assert config["kl_coef"] == 0.04 and config["kl_placement"] == "loss"
    samples = api(service.url, "GET", f"/runs/{run_id}/samples?limit=100")
    assert samples["count"] == 3 * 4  # 4 completions (2 prompts x 2 generations) per step
    assert [s["step"] for s in samples["data"]] == [1] * 4 + [2] * 4 + [3] * 4
    for sample in samples["data"]:
        assert sample["prompt"] in ("a b", "c d", "e f", "g h")
        assert sample["reward"] == sample["scores"]["reward_reward_len"]
        assert sample["reward"] == len(sample["response"])
        assert sample["group"] == sample["index"] // 2 and sample["advantage"] is not None
    evaluated = api(service.url, "GET", f"/runs/{run_id}/samples?split=validation")
    assert evaluated["count"] == 4, evaluated  # 2 evaluation prompts x 2 generations, at step 3
    assert {(s["step"], s["prompt"]) for s in evaluated["data"]} == {(3, "h g"), (3, "f e")}


def test_verl_follower_survives_truncation_and_nulls(
    service: ServiceProcess, run_id: str, spool_dir: Path, tmp_path: Path
) -> None:
    path = tmp_path / "metrics.jsonl"
    run = rlguard.init(
        project="hook", run_id=run_id, url=service.url, spool_dir=str(spool_dir), **FAST
    )
    follower = JsonlFollower(path, run)
    assert follower.poll() == 0  # no file yet
    with open(path, "w") as handle:
        for step in range(1, 6):
            handle.write(json.dumps({"step": step, "data": {"a": step * 1.0, "b": None}}) + "\n")
        handle.write('{"step": 6, "data": {"a"')  # half a line: waits for the rest
    assert follower.poll() == 5
    with open(path, "w") as handle:  # a restarted trainer truncates and rewrites from step 4
        for step in range(4, 8):
            handle.write(json.dumps({"step": step, "data": {"a": step * 10.0}}) + "\n")
    assert follower.poll() == 4
    run.finish()
    stored = stored_series(service.url, run_id)
    assert stored["a"] == {1: 1.0, 2: 2.0, 3: 3.0, 4: 40.0, 5: 50.0, 6: 60.0, 7: 70.0}
    assert stored["b"] == {s: "NaN" for s in range(1, 6)}


def verl_dump_line(step: int, i: int) -> str:
    """One line as verl's ``_dump_generations`` writes it (with an older verl's ``gts``)."""
    record = {
        "input": f"user: {i} + {i} =",
        "output": f"{2 * i}<|im_end|>",
        "gts": str(2 * i),
        "score": float(i % 2),
        "step": step,
        "acc": True,
        "pred": str(2 * i),
    }
    return json.dumps(record, ensure_ascii=False) + "\n"


def test_verl_rollout_follower_logs_dumps_as_samples(
    service: ServiceProcess, run_id: str, spool_dir: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "rollouts"
    run = rlguard.init(
        project="hook", run_id=run_id, url=service.url, spool_dir=str(spool_dir), **FAST
    )
    follower = RolloutDirFollower(folder, run)
    assert follower.poll() == 0  # no folder yet
    folder.mkdir()
    (folder / "1.jsonl").write_text("".join(verl_dump_line(1, i) for i in range(3)))
    (folder / "2.jsonl").write_text(verl_dump_line(2, 0)[:-9])  # verl is still writing it
    (folder / "notes.jsonl").write_text(verl_dump_line(9, 0))
    assert follower.poll() == 3
    (folder / "2.jsonl").write_text("".join(verl_dump_line(2, i) for i in range(2)))
    assert (follower.poll(), follower.poll()) == (2, 0)
    run.finish()
    stored = api(service.url, "GET", f"/runs/{run_id}/samples?limit=100")["data"]
    assert [(s["step"], s["index"], s["reward"]) for s in stored] == [
        (1, 0, 0.0),
        (1, 1, 1.0),
        (1, 2, 0.0),
        (2, 0, 0.0),
        (2, 1, 1.0),
    ]
    first = stored[1]
    assert (first["prompt"], first["response"], first["ground_truth"]) == (
        "user: 1 + 1 =",
        "2<|im_end|>",
        "2",
    )
    assert first["scores"] == {"acc": 1.0}


def write_scalars(folder: Path, steps: range, tag: str = "policy_loss") -> Path:
    """Scalars as OpenRLHF's TensorboardLogger writes them (SummaryWriter.add_scalar)."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder))
    for step in steps:
        writer.add_scalar(f"train/{tag}", step / 10, step)
    writer.close()
    return max(folder.glob("events.out.tfevents.*"), key=lambda p: p.stat().st_mtime_ns)


def test_tensorboard_follower_survives_partial_records_and_new_files(
    service: ServiceProcess, run_id: str, spool_dir: Path, tmp_path: Path
) -> None:
    from rlguard.integrations.tensorboard import TensorboardFollower

    written = write_scalars(tmp_path / "written", range(10))
    data = written.read_bytes()
    folder = tmp_path / "tb"
    folder.mkdir()
    live = folder / written.name
    live.write_bytes(data[: len(data) - 7])  # the last record still being written
    run = rlguard.init(
        project="hook", run_id=run_id, url=service.url, spool_dir=str(spool_dir), **FAST
    )
    follower = TensorboardFollower(folder, run)
    assert follower.poll() == 9
    with open(live, "ab") as handle:
        handle.write(data[len(data) - 7 :])
    assert (follower.poll(), follower.poll()) == (1, 0)
    write_scalars(folder / "critic", range(5, 8), tag="value_loss")  # a restart's new file
    assert follower.poll() == 3
    run.finish()
    stored = stored_series(service.url, run_id)
    assert stored["train/policy_loss"] == {s: pytest.approx(s / 10) for s in range(10)}
    assert stored["critic/train/value_loss"] == {s: pytest.approx(s / 10) for s in range(5, 8)}


@pytest.fixture
def verl_tracking(monkeypatch: pytest.MonkeyPatch) -> type:
    """verl's own ``Tracking`` (verl 0.9.1 installed without its CUDA dependencies), restored
    after the test: ``patch_tracking()`` rebinds its methods."""
    from verl.utils.tracking import Tracking

    for name in ("__init__", "log"):
        monkeypatch.setattr(Tracking, name, getattr(Tracking, name))
    monkeypatch.setattr(Tracking, "_rlguard_patched", False, raising=False)
    return Tracking


def test_verl_tracking_patch_logs_to_rlguard_too(
    service: ServiceProcess,
    run_id: str,
    spool_dir: Path,
    tmp_path: Path,
    verl_tracking: type,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert patch_tracking(run_id=run_id, url=service.url, spool_dir=str(spool_dir), **FAST)
    verl_config = {
        "actor_rollout_ref": {
            "actor": {
                "clip_ratio_low": 0.2,
                "clip_ratio_high": 0.28,
                "use_kl_loss": True,
                "kl_loss_coef": 0.001,
                "kl_loss_type": "low_var_kl",
                "ppo_mini_batch_size": 64,
            },
            "rollout": {"n": 8},
        },
        "data": {"train_batch_size": 256},
    }
    verl_file = tmp_path / "verl.jsonl"  # verl's own record of the same calls
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(verl_file))
    tracking = verl_tracking("verl-proj", "exp-1", ["console", "file"], verl_config)
    tracking.log({"actor/ppo_kl": 0.003, "actor/entropy": math.nan}, step=1)
    tracking.finish()
    tracking._rlguard_run.finish()
    assert [json.loads(line) for line in verl_file.read_text().splitlines()] == [
        {"step": 1, "data": {"actor/ppo_kl": 0.003, "actor/entropy": None}}
    ]
    assert stored_series(service.url, run_id) == {
        "actor/ppo_kl": {1: 0.003},
        "actor/entropy": {1: "NaN"},
    }
    run = api(service.url, "GET", f"/runs/{run_id}")
    assert (run["project"], run["name"]) == ("verl-proj", "exp-1")
    assert run["config"]["updates_per_batch"] == 4 and run["config"]["sequences_per_step"] == 2048
    assert run_config(verl_config)["kl_placement"] == "loss"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlguard", *args],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_sync_replays_a_spool_left_behind(
    service: ServiceProcess, run_id: str, spool_dir: Path
) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    run = rlguard.init(project="hook", run_id=run_id, url=down, spool_dir=str(spool_dir), **FAST)
    for step in range(10):
        run.log({"a": float(step)}, step=step)
    run.finish(status="finished", timeout_s=0)
    done = cli("sync", "--spool-dir", str(spool_dir), "--url", service.url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{run_id}: 10 point(s) replayed" in done.stdout
    assert stored_series(service.url, run_id) == {"a": {s: float(s) for s in range(10)}}
    assert api(service.url, "GET", f"/runs/{run_id}")["status"] == "finished"
    assert not list((spool_dir / run_id).glob("*.batch"))


def test_cli_import_then_export(service: ServiceProcess, run_id: str, tmp_path: Path) -> None:
    log = tmp_path / "verl.log"
    log.write_text(
        "".join(f"step:{s} - actor/entropy:{0.5 - s / 100:.3f} - x:nan\n" for s in range(1, 51))
    )
    rollouts = tmp_path / "rollouts"
    rollouts.mkdir()
    for step in range(1, 51):  # 100 generations a step: the hook keeps its budget of 64
        (rollouts / f"{step}.jsonl").write_text(
            "".join(verl_dump_line(step, i) for i in range(100))
        )
    done = cli(
        "import",
        str(log),
        "--rollouts",
        str(rollouts),
        "--url",
        service.url,
        "--run-id",
        run_id,
        "--project",
        "imp",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "imported 50 step(s), 100 point(s) and 3200 sample(s) as verl-console" in done.stdout
    assert api(service.url, "GET", f"/runs/{run_id}/samples?step=50")["count"] == 64
    stored = stored_series(service.url, run_id)
    assert len(stored["actor/entropy"]) == 50 and stored["x"][7] == "NaN"
    out = tmp_path / "export.csv"
    exported = cli("export", run_id, "--url", service.url, "-o", str(out))
    assert exported.returncode == 0, exported.stdout + exported.stderr
    assert len(out.read_text().splitlines()) == 51


def test_cli_import_says_when_most_step_lines_were_left_out(
    service: ServiceProcess, run_id: str, tmp_path: Path
) -> None:
    from tests.hook.test_importers import verl_console_with_config

    log = tmp_path / "verl.log"
    log.write_text(verl_console_with_config(300))
    auto = cli("import", str(log), "--url", service.url, "--run-id", run_id)
    assert auto.returncode == 0, auto.stdout + auto.stderr
    assert "imported 300 step(s)" in auto.stdout and "warning" not in auto.stdout
    forced = cli("import", str(log), "--url", service.url, "--format", "trl-console")
    assert forced.returncode == 1
    assert "only 2 step(s) were imported as trl-console, but 300 lines" in forced.stdout
    assert "import it again with --format verl-console" in forced.stdout


def test_cli_import_of_no_step_fails_and_names_the_option(
    service: ServiceProcess, run_id: str, tmp_path: Path
) -> None:
    log = tmp_path / "trainer.log"
    log.write_text("loading checkpoint shards\ntraining finished\n")
    forced = cli("import", str(log), "--url", service.url, "--run-id", run_id, "--format", "csv")
    assert forced.returncode == 1, forced.stdout + forced.stderr
    assert f"no step was read from {log} as csv; name its format with --format" in forced.stdout


def follow_until_idle(
    service: ServiceProcess, run_id: str, framework: str, path: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    """``rlguard follow`` into ``run_id`` until half a second passes without news."""
    return cli(
        "follow",
        framework,
        str(path),
        *extra,
        "--url",
        service.url,
        "--run-id",
        run_id,
        "--poll-s",
        "0.1",
        "--exit-after-idle-s",
        "0.5",
    )


def test_cli_follow_verl_until_idle(service: ServiceProcess, run_id: str, tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    rows = ({"step": s, "data": {"a": s, "actor/entropy": math.nan}} for s in range(20))
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))  # NaN, as verl's logger
    rollouts, validation = tmp_path / "rollouts", tmp_path / "validation"
    for folder, steps in ((rollouts, range(3)), (validation, (0, 2))):
        folder.mkdir()
        for step in steps:
            (folder / f"{step}.jsonl").write_text(
                "".join(verl_dump_line(step, i) for i in range(4))
            )
    extra = ("--rollouts", str(rollouts), "--validation", str(validation))
    done = follow_until_idle(service, run_id, "verl", path, *extra)
    assert done.returncode == 0, done.stdout + done.stderr
    stored = stored_series(service.url, run_id)
    assert sorted(stored.pop("actor/entropy")) == list(range(20))
    assert stored == {
        "a": {s: float(s) for s in range(20)},
        # what the hook read from the rollouts' responses (the train split's only)
        "samples/degenerate_fraction": {0: 0.0, 1: 0.0, 2: 0.0},
    }
    assert api(service.url, "GET", f"/runs/{run_id}/samples")["count"] == 3 * 4
    val = api(service.url, "GET", f"/runs/{run_id}/samples?split=validation")
    assert val["count"] == 2 * 4 and {s["step"] for s in val["data"]} == {0, 2}
    assert "and 20 sample(s) sent" in done.stdout + done.stderr
    [alert] = api(service.url, "GET", f"/runs/{run_id}/alerts")["data"]  # the NaN entropy's
    assert (alert["detector"], alert["severity"]) == ("nonfinite", "critical")
    assert alert_lines(done.stderr, run_id, alert) != [], done.stderr


def test_cli_follow_verl_reads_the_file_verls_own_logger_wrote(
    service: ServiceProcess,
    run_id: str,
    tmp_path: Path,
    verl_tracking: type,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import numpy as np

    path = tmp_path / "metrics.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    tracking = verl_tracking("verl-proj", "exp-file", ["file"])
    for step in range(1, 21):  # numpy scalars and a NaN, as verl's trainer logs them
        entropy = math.nan if step == 7 else 0.5 - step / 100
        tracking.log({"actor/entropy": np.float64(entropy), "step_n": np.int64(step)}, step=step)
    tracking.finish()
    done = follow_until_idle(service, run_id, "verl", path)
    assert done.returncode == 0, done.stdout + done.stderr
    stored = stored_series(service.url, run_id)
    assert stored["step_n"] == {s: float(s) for s in range(1, 21)}
    assert stored["actor/entropy"][7] == "NaN"
    assert stored["actor/entropy"][20] == pytest.approx(0.3)


def test_cli_follow_tensorboard_until_idle(
    service: ServiceProcess, run_id: str, tmp_path: Path
) -> None:
    write_scalars(tmp_path / "tb", range(12))
    done = follow_until_idle(service, run_id, "tensorboard", tmp_path / "tb")
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(stored_series(service.url, run_id)["train/policy_loss"]) == list(range(12))


def test_gpu_sampler_without_nvml_logs_host_metrics_only(
    service: ServiceProcess, run_id: str, spool_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    caplog.set_level(logging.INFO, logger="rlguard")
    run = rlguard.init(
        project="hook",
        run_id=run_id,
        url=service.url,
        spool_dir=str(spool_dir),
        gpu=True,
        gpu_interval_s=0.1,
        flush_interval_s=0.05,
    )
    run.log({"a": 1.0}, step=0)
    threading.Event().wait(0.5)  # the sampler's own period, not synchronisation: 5 samples
    run.finish()
    keys = set(stored_series(service.url, run_id))
    if os.path.exists("/dev/nvidia0"):
        assert "system/gpu0/utilization" in keys
        return
    assert {"system/cpu_percent", "system/memory_used_gb"} <= keys
    assert not any(k.startswith("system/gpu") for k in keys)
    assert len([r for r in caplog.records if "no GPU metrics" in r.getMessage()]) == 1
