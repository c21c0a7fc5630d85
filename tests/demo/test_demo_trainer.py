"""The trainer's contract: the logger, reproducibility, the task, the run config and the CLI."""

from __future__ import annotations

import argparse
from dataclasses import replace

import pytest

pytest.importorskip("torch")

from rlguard.demo import PRESETS, PresetConfig, train
from rlguard.demo import cli as demo_cli
from rlguard.demo.task import EOS, PAD, AdditionTask, format_ok, pass_at_k

QUICK = PresetConfig(name="quick", sft_steps=10, groups=4, val_every=2, kl_placement="reward")


def _without_timing(history: list[dict[str, float]]) -> list[dict[str, float]]:
    return [{k: v for k, v in m.items() if not k.startswith("timing")} for m in history]


def test_train_same_seed_gives_identical_metrics() -> None:
    first = train(QUICK, steps=2, seed=3)
    second = train(QUICK, steps=2, seed=3)
    other = train(QUICK, steps=2, seed=4)
    assert _without_timing(first.history) == _without_timing(second.history)
    assert _without_timing(first.history) != _without_timing(other.history)


def test_train_longer_run_begins_with_the_shorter_run() -> None:
    """Why the demo tests share one run per preset and seed (tests/demo/demo_runs.py); QUICK
    validates every 2 steps, as a run does at its last step."""
    short, longer = train(QUICK, steps=2, seed=1), train(QUICK, steps=5, seed=1)
    assert _without_timing(longer.history[:2]) == _without_timing(short.history)


def test_train_calls_log_once_per_step_in_order() -> None:
    calls: list[tuple[int, dict[str, float]]] = []
    result = train(QUICK, steps=3, seed=0, log=lambda metrics, step: calls.append((step, metrics)))
    assert [step for step, _ in calls] == [1, 2, 3]
    assert [metrics for _, metrics in calls] == result.history
    assert all(isinstance(v, float) for _, m in calls for v in m.values())


def test_train_unknown_preset_raises_with_choices() -> None:
    with pytest.raises(ValueError, match="healthy"):
        train("nonexistent", steps=1)


@pytest.mark.parametrize(
    ("tokens", "ok"),
    [
        ([7, EOS, PAD, PAD], True),
        ([1, 2, EOS, PAD], True),
        ([1, 2, 3, EOS], False),
        ([15, EOS, PAD, PAD], False),
    ],
)
def test_format_ok_table(tokens: list[int], ok: bool) -> None:
    import torch

    assert format_ok(torch.tensor([tokens])).item() is ok


def test_task_score_rewards_exact_sum_only() -> None:
    import torch

    task = AdditionTask()
    operands = torch.tensor([[9, 8], [2, 3], [2, 3]])
    responses = torch.tensor([[1, 7, EOS, PAD], [5, EOS, PAD, PAD], [5, 5, EOS, PAD]])
    reward, ok = task.score(responses, operands)
    assert reward.tolist() == [1.0, 1.0, 0.0] and ok.tolist() == [1.0, 1.0, 1.0]


def test_task_split_holds_out_disjoint_prompts() -> None:
    train_set, heldout = AdditionTask().split()
    assert len(train_set) == 80 and len(heldout) == 20
    assert not {tuple(r) for r in train_set.tolist()} & {tuple(r) for r in heldout.tolist()}


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"), [(8, 0, 1, 0.0), (8, 2, 1, 0.25), (8, 1, 8, 1.0), (4, 2, 2, 5 / 6)]
)
def test_pass_at_k_table(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_train_unknown_actor_dtype_raises_naming_the_choices() -> None:
    with pytest.raises(ValueError, match="actor_dtype='bfloat8' must be one of float32, float16"):
        train(PresetConfig(actor_dtype="bfloat8"), steps=1)


def test_train_resumed_run_changes_lr_from_its_step() -> None:
    resumed = replace(QUICK, resumed_at=2, resumed_lr_factor=10.0)
    history = train(resumed, steps=3, seed=0).history
    lrs = [m["actor/lr"] for m in history]  # logged as float32
    assert lrs == pytest.approx([QUICK.lr, QUICK.lr * 10, QUICK.lr * 10], rel=1e-6)
    plain = train(QUICK, steps=1, seed=0).history
    assert _without_timing(history[:1]) == _without_timing(plain)  # nothing changes before it


def test_run_config_lists_resume_knobs_only_off_their_defaults() -> None:
    assert "resumed_at" not in PRESETS["healthy"].run_config(planned_steps=200)
    assert "actor_dtype" not in PRESETS["healthy"].run_config(planned_steps=200)
    overflow = PRESETS["fp16-overflow"].run_config(planned_steps=200)
    assert (overflow["actor_dtype"], overflow["resumed_at"]) == ("float16", 40)
    assert overflow["resumed_lr_factor"] == 1e4 and "resumed_ppo_epochs" not in overflow


def test_run_config_carries_detector_context() -> None:
    config = PRESETS["adaptive-kl"].run_config(planned_steps=200)
    assert config["updates_per_batch"] == 2 and config["sequences_per_step"] == 128  # 1 x 2, 16 x 8
    assert config["kl_placement"] == "reward" and config["kl_ctrl_type"] == "adaptive"
    assert (config["planned_steps"], config["preset"]) == (200, "adaptive-kl")
    for key in [
        "clip_ratio_low",
        "clip_ratio_high",
        "clip_ratio_c",
        "kl_estimator",
        "kl_coef",
        "kl_target",
        "kl_horizon",
        "reward_min",
        "reward_max",
        "entropy_coeff",
    ]:
        assert key in config


def test_cli_defaults_and_no_log_run(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    demo_cli.add_arguments(parser)
    defaults = parser.parse_args([])
    assert (defaults.preset, defaults.steps, defaults.project, defaults.device) == (
        "all",
        200,
        "demo",
        "auto",
    )
    args = parser.parse_args(
        ["--preset", "kl-too-strong", "--steps", "2", "--no-log", "--device", "cpu"]
    )
    assert demo_cli.run(args) == 0
    assert "kl-too-strong: 2 steps" in capsys.readouterr().out


def test_train_logs_decoded_rollouts_as_samples() -> None:
    calls: list[tuple[int, list[dict]]] = []
    train(QUICK, steps=2, seed=0, log_samples=lambda samples, step: calls.append((step, samples)))
    assert [(step, len(samples)) for step, samples in calls] == [(1, 32), (2, 32)]
    for sample in calls[0][1]:
        a, b = (int(d) for d in sample["prompt"].rstrip("=").split("+"))
        assert sample["reference"] == f"{a + b}<eos>"
        assert sample["reward"] == float(sample["response"] == sample["reference"])
        assert sample["length"] == len(sample["tokens"]) == len(sample["token_kl"])
        assert "".join(sample["tokens"]) == sample["response"]
    groups = [s["group"] for s in calls[0][1]]
    assert groups == sorted(groups) and len(set(groups)) == 4


def test_engine_synced_in_fp32_samples_exactly_as_the_trainer() -> None:
    import dataclasses

    plain = train(QUICK, steps=3, seed=5)
    engine = train(dataclasses.replace(QUICK, rollout_engine=True), steps=3, seed=5)
    gap_keys = {
        k for m in engine.history for k in m if k.startswith(("rollout_corr/", "training/"))
    }
    assert not any(k.startswith(("rollout_corr/", "training/")) for m in plain.history for k in m)
    assert "rollout_corr/k3_kl" in gap_keys and "rollout_corr/log_ppl_abs_diff" in gap_keys
    assert [m["rollout_corr/k3_kl"] for m in engine.history] == [0.0, 0.0, 0.0]
    assert min(engine.series("training/rollout_actor_probs_pearson_corr")) > 0.999999
    without_gap = [{k: v for k, v in m.items() if k not in gap_keys} for m in engine.history]
    assert _without_timing(without_gap) == _without_timing(plain.history)
    assert not set(QUICK.run_config(3)) & {"rollout_engine", "engine_dtype"}


def test_engine_whose_sync_stops_drifts_from_the_trainer() -> None:
    import dataclasses

    stale = dataclasses.replace(QUICK, rollout_engine=True, engine_sync_stops_at=2)
    gap = train(stale, steps=4, seed=5).series("rollout_corr/k3_kl")
    assert gap[0] == 0.0 and min(gap[1:]) > 0.0
    assert stale.run_config(4)["engine_sync_stops_at"] == 2
