"""Readers of finished runs' logs, table-driven over real-looking samples of each format."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from rlguard.integrations import importers

VERL_OLD = "step:1 - actor/entropy:0.530 - actor/pg_clipfrac:0.002 - timing_s/step:12.500\n"
VERL_NEW = (
    "\x1b[36m(TaskRunner pid=4242)\x1b[0m step:2 - actor/entropy:np.float64(0.5213) - "
    "actor/ppo_kl:np.float64(-0.0001) - critic/score/mean:nan\n"
)
OPENRLHF = "✨ Global step 7: {'policy_loss': 0.12, 'kl': 0.003, 'reward': nan, 'lr': 1e-06}\n"
TRL = (
    "{'loss': '0.1234', 'grad_norm': '1.5', 'learning_rate': '1e-06', 'epoch': '0.5'}\n"
    "noise line\n"
    "{'loss': 0.2, 'reward': 0.5}\n"
    "{'train_runtime': 10.0, 'train_samples_per_second': 1.0, 'train_loss': 0.3}\n"
)


def test_import_verl_console_both_value_formats(tmp_path: Path) -> None:
    path = tmp_path / "verl.log"
    path.write_text("starting\n" + VERL_OLD + VERL_NEW)
    assert importers.detect_format(path) == "verl-console"
    records = list(importers.read_verl_console(path))
    assert records[0] == (
        1,
        {"actor/entropy": 0.53, "actor/pg_clipfrac": 0.002, "timing_s/step": 12.5},
    )
    step, values = records[1]
    assert step == 2 and values["actor/entropy"] == 0.5213 and values["actor/ppo_kl"] == -0.0001
    assert math.isnan(values["critic/score/mean"])


def test_import_openrlhf_global_step_lines(tmp_path: Path) -> None:
    path = tmp_path / "openrlhf.log"
    path.write_text("loading\n" + OPENRLHF)
    assert importers.detect_format(path) == "openrlhf-console"
    [(step, values)] = list(importers.read_openrlhf_console(path))
    assert step == 7 and values["policy_loss"] == 0.12 and math.isnan(values["reward"])


def test_import_trl_console_dicts_skip_the_summary(tmp_path: Path) -> None:
    path = tmp_path / "trl.log"
    path.write_text(TRL)
    assert importers.detect_format(path) == "trl-console"
    records = list(importers.read_trl_console(path, logging_steps=10))
    assert records == [
        (10, {"loss": 0.1234, "grad_norm": 1.5, "learning_rate": 1e-06, "epoch": 0.5}),
        (20, {"loss": 0.2, "reward": 0.5}),
    ]


# A crafted console: a described bar (checkpoint loading) and an evaluation bar are not the
# training bar; tqdm redraws with carriage returns; the dict after an evaluation is at the
# training bar's count, as is the evaluation's own dict.
TRL_WITH_BARS = (
    "Loading checkpoint shards: 100%|##########| 2/2 [00:00<00:00,  8.66it/s]\n"
    "\r  0%|          | 0/300 [00:00<?, ?it/s]\r  2%|▏         | 5/300 [00:50<49:10, 10.0s/it]"
    "\r                              \r{'loss': 0.1, 'reward': 0.2}\n"
    "\r  3%|▎         | 8/300 [01:20<48:40, 10.0s/it]\n"
    "\r 67%|██████▋   | 2/3 [00:01<00:00,  2.0it/s]\r100%|██████████| 3/3 [00:01<00:00,  2.0it/s]\n"
    "{'eval_loss': 0.5, 'eval_reward': 0.3}\n"
    "\r  3%|▎         | 10/300 [01:40<48:20, 10.0s/it]{'loss': 0.2, 'reward': 0.4}\n"
)


def test_import_trl_console_takes_the_trainers_step_from_its_progress_bar(tmp_path: Path) -> None:
    path = tmp_path / "trl.log"
    path.write_text(TRL_WITH_BARS)
    assert importers.detect_format(path) == "trl-console"
    expected = [
        (5, {"loss": 0.1, "reward": 0.2}),
        (8, {"eval_loss": 0.5, "eval_reward": 0.3}),
        (10, {"loss": 0.2, "reward": 0.4}),
    ]
    assert list(importers.read_trl_console(path)) == expected
    # The log's own step wins over --logging-steps, which only numbers logs without a bar.
    assert list(importers.read_trl_console(path, logging_steps=7)) == expected


def test_import_trl_console_real_log_with_its_progress_bars_reads_steps_10_to_490() -> None:
    # JuncyLu/trl_DAPO's run (tests/data/public_logs/SOURCES.md): logging_steps 10, the bar
    # drawn before each dict; imported without --logging-steps, its steps are the trainer's.
    path = PUBLIC_LOGS / "trl_grpo_qwen25vl3b_collapse.log"
    steps = [step for step, _ in importers.read_trl_console(path)]
    assert steps == list(range(10, 500, 10))


def test_import_trainer_state_log_history(tmp_path: Path) -> None:
    path = tmp_path / "trainer_state.json"
    history = [
        {"step": 5, "loss": 0.1},
        {"step": 10, "reward": 0.4},
        {"step": 10, "train_runtime": 3.0, "total_flos": 1.0},
    ]
    path.write_text(json.dumps({"log_history": history}))
    assert importers.detect_format(path) == "trainer-state"
    assert list(importers.read_trainer_state(path)) == [(5, {"loss": 0.1}), (10, {"reward": 0.4})]


def test_import_verl_jsonl_nulls_are_nan(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "data": {"a": 0.5, "b": null}}\n{"step": 2, "data": {"a": 1}}\n')
    assert importers.detect_format(path) == "verl-jsonl"
    records = list(importers.read_verl_jsonl(path))
    assert records[0][1]["a"] == 0.5 and math.isnan(records[0][1]["b"])
    assert records[1] == (2, {"a": 1})


def test_import_csv_empty_cells_are_absent(tmp_path: Path) -> None:
    path = tmp_path / "run.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerows([["step", "a", "b"], [0, 0.5, ""], [1, "NaN", 2]])
    records = list(importers.read_csv(path))
    assert records[0] == (0, {"a": 0.5}) and math.isnan(records[1][1]["a"])


def test_import_tensorboard_directory(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path))
    for step in range(3):
        writer.add_scalar("train/kl", step * 0.1, step)
        writer.add_scalar("train/entropy", 1.0 - step * 0.1, step)
    writer.close()
    assert importers.detect_format(tmp_path) == "tensorboard"
    records = list(importers.read_tensorboard(tmp_path))
    assert [s for s, _ in records] == [0, 1, 2]
    assert records[2][1]["train/kl"] == pytest.approx(0.2)


def verl_console_with_config(steps: int) -> str:
    """A verl console log as a run prints it: its whole config (pprint), then step lines."""
    import pprint

    actor = {
        "clip_ratio_low": 0.2,
        "clip_ratio_high": 0.28,
        "ppo_mini_batch_size": 256,
        "optim": {"lr": 1e-06, "weight_decay": 0.01, "warmup_style": "constant"},
        "checkpoint": {"contents": ["model", "optimizer", "extra"]},
    }
    config = {
        "actor_rollout_ref": {"actor": actor, "rollout": {f"opt_{i}": i for i in range(60)}},
        "algorithm": {"adv_estimator": "grpo", "kl_ctrl": {"kl_coef": 0.001, "type": "fixed"}},
        "data": {f"field_{i}": f"value_{i}" for i in range(150)},
        "trainer": {"logger": ["console", "file"], "total_training_steps": steps},
    }
    printed = pprint.pformat(config, width=80) + "\n"
    banner = "{'n_gpus_per_node': 8, 'nnodes': 1}\n{'global_pool': 8, 'ref_pool': 8}\n"
    lines = "".join(
        f"(TaskRunner pid=4242) step:{s} - actor/entropy:{0.6 - s / 1e4:.3f} - "
        f"actor/ppo_kl:{s / 1e5:.5f} - critic/score/mean:0.5\n"
        for s in range(1, steps + 1)
    )
    return printed + banner + lines


def test_detect_format_reads_past_verl_printed_config(tmp_path: Path) -> None:
    path = tmp_path / "verl.log"
    path.write_text(verl_console_with_config(400))
    assert len(path.read_text().splitlines()[:250]) == 250  # the config alone fills the head
    assert importers.count_step_lines(path) == {
        "verl-jsonl": 0,
        "openrlhf-console": 0,
        "verl-console": 400,
        "trl-console": 2,
    }
    assert importers.detect_format(path) == "verl-console"
    assert len(list(importers.read_verl_console(path))) == 400


PUBLIC_LOGS = Path(__file__).resolve().parents[1] / "data" / "public_logs"


def test_import_ms_swift_json_console_line_takes_its_named_step() -> None:
    # a line quoted from ms-swift#5890: ms-swift prints TRL's log dict as JSON, step in it
    path = PUBLIC_LOGS / "swift_grpo_issue5890_zero_grad.log"
    assert importers.detect_format(path) == "trl-console"
    [(step, values)] = list(importers.read_trl_console(path, logging_steps=5))
    assert step == 1
    assert "global_step/max_steps" not in values
    assert values["grad_norm"] == 0.0 and values["kl"] == 0.0
    assert values["frac_reward_zero_std"] == 0.515625
