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


# The tail (rollout_tail). TRL#6789: a healthy BF16 engine reads a mean |Δ log p| of 0.0007
# while 7.5 % of the tokens fall outside [0.9, 1.1] and the largest gap is ~0.5 nats.


def trl_tail_widens(t: int, rng: random.Random) -> dict[str, float]:
    """TRL's keys: the mean gap stays tiny while the largest gap grows x1.05 a step from 150."""
    growth = 1.05 ** max(0, t - 150)
    return {
        "sampling/sampling_logp_difference/mean": 7e-4 * math.exp(0.1 * rng.gauss(0, 1)),
        "sampling/sampling_logp_difference/max": 0.5 * growth * math.exp(0.2 * rng.gauss(0, 1)),
        "sampling/importance_sampling_ratio/min": 0.0,  # sequence_mask: masked sequences read 0
        "sampling/importance_sampling_ratio/mean": min(1.0, 0.99 + 0.005 * rng.gauss(0, 1)),
        "sampling/importance_sampling_ratio/max": 3.0,  # at vllm_importance_sampling_clip_max
    }


def trl_steady(t: int, rng: random.Random) -> dict[str, float]:
    return trl_tail_widens(0, rng)


def probe_tail(share: Callable[[int], float]) -> Callable[[int, random.Random], dict[str, float]]:
    """rlguard.probes.rollout_tail's keys with the share outside the band given per step and
    the percentiles that go with it; the mean stays at 0.0007."""

    def extra(t: int, rng: random.Random) -> dict[str, float]:
        outside = share(t) * math.exp(0.05 * rng.gauss(0, 1))
        width = 0.13 * max(1.0, outside / 0.075)  # p99 |Δ log p| widening with the share
        return {
            "probe/rollout_ratio_outside_band": outside,
            "probe/rollout_logprob_diff_p99": width,
            "probe/rollout_ratio_p01": math.exp(-width),
            "probe/rollout_ratio_p99": math.exp(width),
            "probe/rollout_logprob_diff_mean": 7e-4,
        }

    return extra


def is_mean_falls(level: float) -> Callable[[int, random.Random], dict[str, float]]:
    """The mean importance ratio after masking drops to `level` from step 100."""

    def extra(t: int, rng: random.Random) -> dict[str, float]:
        mean = 0.99 if t < 100 else level
        return {
            "sampling/importance_sampling_ratio/mean": mean,
            "sampling/sampling_logp_difference/mean": 7e-4,
        }

    return extra


@pytest.mark.parametrize(
    "extra", [trl_steady, probe_tail(lambda t: 0.075)], ids=["trl_masked", "probe_bf16"]
)
def test_rollout_tail_silent_on_a_healthy_tail(extra: Callable) -> None:
    assert {seed: run(extra, seed) for seed in SEEDS} == {seed: [] for seed in SEEDS}


def test_rollout_tail_warns_on_the_largest_gap_while_the_mean_is_tiny() -> None:
    for seed in SEEDS:
        events = run(trl_tail_widens, seed)
        # x5 the start (~0.5) from 150 + ln 5 / ln 1.05 = 183, through a 5-step EMA, 3 steps
        warn = first(events, "rollout_tail", "warn")
        assert warn is not None and 183 <= warn <= 200, (seed, warn)
        assert first(events, "rollout_mismatch", "warn") is None  # the mean says nothing
        alert = next(e for e in events if e.key == "rollout_tail")
        evidence = alert.evidence
        assert evidence["logprob_diff_max"] >= 5 * evidence["logprob_diff_max_start"]
        assert evidence["logprob_abs_diff_mean"] < 1e-3
        assert evidence["ratio_min"] == 0.0 and evidence["ratio_max"] == 3.0
        assert "while the mean |Δ log p| is only 0.000" in alert.message
        assert "the largest |Δ log p| of a token is" in alert.message


def test_rollout_tail_follows_the_share_outside_the_band() -> None:
    widening = probe_tail(lambda t: 0.075 if t < 100 else 0.3)
    for seed in SEEDS:
        events = run(widening, seed)
        # the 5-step EMA passes 3x the start 0.075 (and 0.15) 8 steps in, then 3 steps held
        assert 106 <= first(events, "rollout_tail", "warn") <= 114
        assert first(events, "rollout_tail", "critical") is None
        alert = next(e for e in events if e.key == "rollout_tail")
        assert 0.2 <= alert.evidence["tail_share"] <= 0.3
        assert alert.evidence["tail_share_start"] == pytest.approx(0.075, rel=0.1)
        assert "of the tokens have a ratio outside the band" in alert.message


def test_rollout_tail_critical_when_most_tokens_leave_the_band() -> None:
    events = run(probe_tail(lambda t: 0.075 if t < 100 else 0.9), 0)
    # the EMA passes 0.8 about 16 steps in, then 3 steps held
    assert 112 <= first(events, "rollout_tail", "critical") <= 124


@pytest.mark.parametrize(
    ("level", "severity", "window"),
    [(0.57, "warn", (100, 106)), (0.03, "critical", (100, 106)), (0.95, None, None)],
)
def test_rollout_tail_reads_the_mean_ratio_after_masking(
    level: float, severity: str | None, window: tuple[int, int] | None
) -> None:
    # 0.57: TRL's sequence IS summed instead of averaged (TRL#5814); 0.03: nearly every
    # sequence masked; 0.95: top_p=0.95's kept mass, a bias too small to warn on
    events = run(is_mean_falls(level), 0)
    if severity is None:
        assert events == []
        return
    step = first(events, "rollout_tail", severity)
    assert window is not None and step is not None and window[0] <= step <= window[1]
    assert next(e for e in events if e.key == "rollout_tail").evidence["is_ratio_mean"] < 1
