"""Real frameworks logging to W&B under ``rlguard watch``: TRL's ``GRPOTrainer`` with
``report_to="wandb"`` (and rlguard's callback beside it, to compare) and verl's ``Tracking``
with its wandb backend."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from rlguard_backend.signals import keys_by_signal
from tests.hook import wandb_loop
from tests.hook.hookutil import stored_series
from tests.hook.test_integrations import tiny_model_dir
from tests.hook.test_wandb import run_loop, series_without_system


def test_watch_stores_what_verls_wandb_backend_logs(tmp_path: Path, service: Any) -> None:
    wandb_id = uuid.uuid4().hex[:8]
    done = run_loop(tmp_path, service.url, "verl", wandb_id)
    assert done.returncode == 0, done.stderr
    steps = range(1, wandb_loop.VERL_STEPS + 1)
    expected: dict[str, dict[int, float]] = {"actor/entropy": {}, "critic/score/mean": {}}
    for step in steps:
        for key, value in wandb_loop.verl_values(step).items():
            expected[key][step] = pytest.approx(value)
    assert series_without_system(service.url, f"wandb-verl-watched-{wandb_id}") == expected


def test_watch_trl_grpo_reported_to_wandb_stores_what_the_callback_stores(
    tmp_path: Path, service: Any
) -> None:
    wandb_id = uuid.uuid4().hex[:8]
    model = tiny_model_dir(tmp_path)
    done = run_loop(tmp_path / "w", service.url, "trl", wandb_id, service.url, str(model))
    assert done.returncode == 0, done.stderr
    watched = series_without_system(service.url, f"wandb-trl-watched-{wandb_id}")
    by_callback = stored_series(service.url, f"callback-{wandb_id}")
    assert by_callback["entropy"].keys() == {1, 2, 3}
    # transformers' WandbCallback renames each key `train/<key>` and adds its step axis
    # `train/global_step`; TRL sends its profiling timings to W&B alone
    renamed = {
        key.removeprefix("train/"): series
        for key, series in watched.items()
        if key.startswith("train/") and key != "train/global_step"
    }
    assert renamed == by_callback
    others = set(watched) - {f"train/{key}" for key in by_callback} - {"train/global_step"}
    assert others and all(key.startswith("profiling/") for key in others)
    signals = keys_by_signal(watched)
    assert signals.keys() == keys_by_signal(by_callback).keys()
    assert {"entropy", "clipfrac", "frac_zero_std", "reward_mean"} <= signals.keys()
