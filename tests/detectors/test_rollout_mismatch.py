"""D9 train-inference mismatch on synthetic runs built on the S1 base (DETECTORS.md §4)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest

from rlguard_backend.stability import DetectorSuite
from tests.detectors.scenarios import base_config, healthy

STEPS = 300
SEEDS = range(20)


def run(extra: Callable[[int, random.Random], dict[str, float]], seed: int) -> list:
    rng = random.Random(seed)
    suite = DetectorSuite(base_config(STEPS))
    events = []
    for t in range(STEPS):
        values = {**healthy(t, rng), **extra(t, rng)}
        events += suite.feed(t, values)
    return [e for e in events if e.detector == "rollout_mismatch"]


def first(events: list, key: str, severity: str) -> int | None:
    rank = {"info": 0, "warn": 1, "critical": 2}
    hits = [e.last_step for e in events if e.key == key and rank[e.severity] >= rank[severity]]
    return min(hits, default=None)


def steady_dense(t: int, rng: random.Random) -> dict[str, float]:
    """A dense model's healthy gap: k3 KL ~1e-4, noisy, corr 0.999, ESS ~0.95."""
    return {
        "rollout_corr/k3_kl": 1e-4 * math.exp(0.3 * rng.gauss(0, 1)),
        "training/rollout_actor_probs_pearson_corr": 0.999,
        "rollout_corr/rollout_is_eff_sample_size": min(1.0, 0.95 + 0.02 * rng.gauss(0, 1)),
    }


def steady_moe(t: int, rng: random.Random) -> dict[str, float]:
    """An MoE model's healthy gap: k3 KL ~2e-2, steady (its own normal, not an alarm)."""
    return {"rollout_corr/k3_kl": 2e-2 * math.exp(0.3 * rng.gauss(0, 1))}


def drifting(t: int, rng: random.Random) -> dict[str, float]:
    """The gap grows late in training: x1.04 per step from step 150."""
    growth = 1.04 ** max(0, t - 150)
    return {"rollout_corr/k3_kl": 1e-4 * growth * math.exp(0.1 * rng.gauss(0, 1))}


def broken_kernel(t: int, rng: random.Random) -> dict[str, float]:
    """A fused-MoE kernel bug from step 200: corr 0.999 -> 0.37, KL 0.0024 -> 5.8."""
    if t < 200:
        return {"rollout_corr/kl": 0.0024, "training/rollout_actor_probs_pearson_corr": 0.999}
    return {"rollout_corr/kl": 5.8, "training/rollout_actor_probs_pearson_corr": 0.37}


def ess_decays(t: int, rng: random.Random) -> dict[str, float]:
    return {"rollout_corr/rollout_is_eff_sample_size": max(0.05, 0.95 - 0.005 * t)}


def slime_gap(t: int, rng: random.Random) -> dict[str, float]:
    return {"train/train_rollout_logprob_abs_diff": 0.02 if t < 100 else 0.15}


@pytest.mark.parametrize("extra", [steady_dense, steady_moe])
def test_rollout_mismatch_silent_on_a_steady_gap(extra: Callable) -> None:
    assert {seed: run(extra, seed) for seed in SEEDS} == {seed: [] for seed in SEEDS}


def test_rollout_mismatch_warns_when_the_gap_grows_then_escalates() -> None:
    for seed in SEEDS:
        events = run(drifting, seed)
        # x10 of the start (and >= 1e-3) from step 150 + ln 10 / ln 1.04 = 209, x100 (and
        # >= 1e-2) from 267; each held 3 steps, through a 5-step EMA
        warn = first(events, "rollout_mismatch", "warn")
        critical = first(events, "rollout_mismatch", "critical")
        assert warn is not None and 209 <= warn <= 225, (seed, warn)
        assert critical is not None and 267 <= critical <= 285, (seed, critical)


def test_rollout_mismatch_critical_on_a_broken_engine_at_once() -> None:
    events = run(broken_kernel, 0)
    assert first(events, "rollout_mismatch", "warn") == first(
        events, "rollout_mismatch", "critical"
    )
    assert 200 <= first(events, "rollout_mismatch", "critical") <= 203
    critical = next(e for e in events if e.severity == "critical")
    assert critical.evidence["probs_pearson_corr"] == 0.37
    assert "more off-policy than the update assumes" in critical.message


def test_rollout_is_degenerate_follows_the_effective_sample_size() -> None:
    events = run(ess_decays, 0)
    # ESS < 0.5 from t = 90, < 0.2 from t = 150, each held 3 steps (through a 5-step EMA)
    assert 90 <= first(events, "rollout_is_degenerate", "warn") <= 100
    assert 150 <= first(events, "rollout_is_degenerate", "critical") <= 160


def test_rollout_mismatch_reads_slimes_logprob_gap() -> None:
    events = run(slime_gap, 0)
    assert 100 <= first(events, "rollout_mismatch", "warn") <= 110
    assert first(events, "rollout_mismatch", "critical") is None
