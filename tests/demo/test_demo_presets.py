"""Each preset, trained for real on CPU, shows its phenomenon in the logged metrics.

All presets train once on seed 0, in parallel single-threaded processes (the ``all`` path),
shortened to 120 steps (the first 120 steps of test_demo_alerts' runs where it trains that far);
"start" is the mean of the first 10 steps and "end" the mean of the last 20.
"""

from __future__ import annotations

import math

import pytest

pytest.importorskip("torch")

from rlguard.demo import ALL, PRESETS, TrainResult
from rlguard.demo.presets import DETECTOR_PRESETS, RESUMED_PRESETS
from rlguard.demo.task import VOCAB
from rlguard_backend.stability import DEFAULTS
from tests.demo.demo_runs import DemoRuns

STEPS = 120
VERL_KEYS = [
    "actor/ppo_kl",
    "actor/pg_clipfrac",
    "actor/pg_clipfrac_lower",
    "actor/entropy",
    "actor/grad_norm",
    "critic/score/mean",
    "response_length/mean",
    "frac_reward_zero_std",
    "probe/cov_logp_adv",
]


@pytest.fixture(scope="module")
def runs(demo_runs: DemoRuns) -> dict[str, TrainResult]:
    return dict(zip(ALL, demo_runs.train([(name, STEPS, 0) for name in ALL]), strict=True))


def _start(result: TrainResult, key: str) -> float:
    values = result.series(key)[:10]
    return sum(values) / len(values)


def _end(result: TrainResult, key: str) -> float:
    values = result.series(key)[-20:]
    return sum(values) / len(values)


def test_presets_all_log_verl_keys_every_step(runs: dict[str, TrainResult]) -> None:
    assert set(runs) == set(ALL) == set(PRESETS) - set(DETECTOR_PRESETS) - set(RESUMED_PRESETS)
    for result in runs.values():
        assert len(result.history) == STEPS
        for metrics in result.history:
            assert set(VERL_KEYS) <= set(metrics)
            assert all(math.isfinite(v) for v in metrics.values())
        assert "val/pass@1" in result.history[0] and "val/pass@8" in result.history[-1]


def test_presets_all_move_the_ratio_within_a_batch(runs: dict[str, TrainResult]) -> None:
    for result in runs.values():  # several updates per batch: ratio ≠ 1, clipping can act
        assert max(abs(v) for v in result.series("actor/ppo_kl")) > 1e-4
        assert max(result.series("actor/pg_clipfrac")) > 0


def test_preset_healthy_improves_reward_and_keeps_entropy(runs: dict[str, TrainResult]) -> None:
    healthy = runs["healthy"]
    assert _end(healthy, "critic/score/mean") > _start(healthy, "critic/score/mean") + 0.1
    assert _end(healthy, "actor/entropy") > 0.5 * _start(healthy, "actor/entropy")


def test_preset_collapse_loses_entropy_without_reward_gain(runs: dict[str, TrainResult]) -> None:
    collapse = runs["collapse"]
    assert _end(collapse, "actor/entropy") < 0.5 * _start(collapse, "actor/entropy")
    assert _end(collapse, "critic/score/mean") <= _start(collapse, "critic/score/mean") + 0.03
    assert _end(collapse, "frac_reward_zero_std") > 0.8


def test_preset_runaway_kl_keeps_growing(runs: dict[str, TrainResult]) -> None:
    kl = runs["runaway-kl"].series("actor/kl_loss")
    quarters = [sum(kl[i : i + STEPS // 4]) / (STEPS // 4) for i in range(0, STEPS, STEPS // 4)]
    assert quarters[0] < quarters[1] and quarters[0] < quarters[2]
    assert quarters[3] > 2 * quarters[0]
    assert runs["runaway-kl"].series("actor/kl_coef")[-1] == pytest.approx(0.001)


def _late(result: TrainResult, key: str) -> float:
    values = result.series(key)[STEPS // 2 :]
    return sum(values) / len(values)


def test_preset_kl_too_strong_pins_kl_and_flattens_reward(runs: dict[str, TrainResult]) -> None:
    """KL to the reference held below the level at which D5 calls the policy unmoved, over the
    whole second half, while the healthy run (same seed) settles above it; reward flat."""
    strong = runs["kl-too-strong"]
    penalty = strong.series("actor/reward_kl_penalty")
    assert sum(penalty) / len(penalty) < 0.03
    unmoved = DEFAULTS["kl_penalty"]["small_kl"]
    assert _late(strong, "probe/kl_to_ref") < unmoved < _late(runs["healthy"], "probe/kl_to_ref")
    assert abs(_end(strong, "critic/score/mean") - _start(strong, "critic/score/mean")) < 0.06
    assert _end(runs["healthy"], "critic/score/mean") > _end(strong, "critic/score/mean") + 0.1


def test_preset_entropy_blowup_drifts_to_uniform_and_breaks_format(
    runs: dict[str, TrainResult],
) -> None:
    blowup = runs["entropy-blowup"]
    assert _end(blowup, "actor/entropy") > 1.5 * _start(blowup, "actor/entropy")
    assert _end(blowup, "actor/entropy") > 0.5 * math.log(len(VOCAB))
    assert _end(blowup, "response/format_ok") < 0.7 < _start(blowup, "response/format_ok")


def test_preset_adaptive_kl_holds_kl_near_target(runs: dict[str, TrainResult]) -> None:
    adaptive = runs["adaptive-kl"]
    target = PRESETS["adaptive-kl"].kl_target
    late = adaptive.series("actor/reward_kl_penalty")[STEPS // 2 :]
    assert 0.5 * target < sum(late) / len(late) < 1.5 * target
    coef = adaptive.series("actor/reward_kl_penalty_coeff")
    assert coef[0] == PRESETS["adaptive-kl"].kl_coef  # the controller really moves β
    assert max(abs(c - coef[0]) for c in coef) > 0.2 * coef[0]
