"""The engine-vs-trainer tail summary (probes.rollout_tail) and what the detectors make of it."""

from __future__ import annotations

import math
import random

import pytest

torch = pytest.importorskip("torch")

from rlguard import probes  # noqa: E402
from rlguard_backend.signals import canonical_signal  # noqa: E402
from rlguard_backend.stability import DetectorSuite  # noqa: E402
from tests.detectors.scenarios import base_config, healthy  # noqa: E402

# 200 valid tokens whose log-ratios are -1.00, -0.99, ... 0.99 (two rows), then padding
DIFFS = [round(-1.0 + 0.01 * i, 2) for i in range(200)]


def _inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rollout = torch.full((2, 110), -2.0, dtype=torch.float64)
    diff = torch.full((2, 110), 50.0, dtype=torch.float64)  # padding: a gap to be ignored
    diff[:, :100] = torch.tensor(DIFFS, dtype=torch.float64).reshape(2, 100)
    mask = torch.zeros(2, 110)
    mask[:, :100] = 1
    return rollout + diff, rollout, mask


def test_rollout_tail_nearest_rank_percentiles_over_valid_tokens() -> None:
    stats = probes.rollout_tail(*_inputs())
    assert list(stats) == list(probes.ROLLOUT_TAIL_KEYS)
    ordered, gaps = sorted(DIFFS), sorted(abs(d) for d in DIFFS)
    # nearest rank: the ceil(0.01 * 200) = 2nd and ceil(0.99 * 200) = 198th smallest
    assert stats["probe/rollout_ratio_p01"].item() == pytest.approx(math.exp(ordered[1]))
    assert stats["probe/rollout_ratio_p99"].item() == pytest.approx(math.exp(ordered[197]))
    assert stats["probe/rollout_logprob_diff_p99"].item() == pytest.approx(gaps[197])
    assert stats["probe/rollout_logprob_diff_mean"].item() == pytest.approx(sum(gaps) / 200)
    # ratio outside [0.9, 1.1]: log-ratio < ln 0.9 = -0.105 or > ln 1.1 = 0.0953
    outside = sum(1 for d in DIFFS if d < math.log(0.9) or d > math.log(1.1))
    assert stats["probe/rollout_ratio_outside_band"].item() == pytest.approx(outside / 200)


def test_rollout_tail_band_is_configurable() -> None:
    stats = probes.rollout_tail(*_inputs(), band=(0.5, 2.0))
    outside = sum(1 for d in DIFFS if d < math.log(0.5) or d > math.log(2.0))
    assert stats["probe/rollout_ratio_outside_band"].item() == pytest.approx(outside / 200)


@pytest.mark.parametrize("band", [(1.0, 1.1), (0.9, 0.95), (0.0, 1.1), (1.2, 0.8)])
def test_rollout_tail_rejects_a_band_not_around_one(band: tuple[float, float]) -> None:
    with pytest.raises(ValueError, match="0 < low < 1 < high"):
        probes.rollout_tail(*_inputs(), band=band)


def test_rollout_tail_without_valid_tokens_is_nan() -> None:
    logp, rollout, mask = _inputs()
    stats = probes.rollout_tail(logp, rollout, torch.zeros_like(mask))
    assert all(math.isnan(value.item()) for value in stats.values())


def test_rollout_tail_keys_map_onto_the_tail_signals() -> None:
    assert {key: canonical_signal(key) for key in probes.ROLLOUT_TAIL_KEYS} == {
        "probe/rollout_ratio_p01": "rollout_ratio_p01",
        "probe/rollout_ratio_p99": "rollout_ratio_p99",
        "probe/rollout_logprob_diff_p99": "rollout_logprob_diff_p99",
        "probe/rollout_logprob_diff_mean": "rollout_logprob_diff",
        "probe/rollout_ratio_outside_band": "rollout_tail_share",
    }


def test_rollout_tail_feeds_the_mismatch_detector_when_the_tail_widens() -> None:
    """A loop logging the probe's output: a heavy tail from step 100 (2 % of the tokens off by
    ~1 nat, the rest as close as BF16 gets) opens rollout_tail while the mean stays small."""
    gen = torch.Generator().manual_seed(0)
    rng = random.Random(0)
    suite, events = DetectorSuite(base_config(200)), []
    rollout = torch.full((16, 256), -1.5)
    mask = torch.ones(16, 256)
    for t in range(200):
        diff = 0.02 * torch.randn(16, 256, generator=gen)
        if t >= 100:
            outliers = torch.rand(16, 256, generator=gen) < 0.02
            diff = torch.where(outliers, diff + torch.randn(16, 256, generator=gen), diff)
        stats = probes.rollout_tail(rollout + diff, rollout, mask)
        values = {key: value.item() for key, value in stats.items()}
        events += suite.feed(t, {**healthy(t, rng), **values})
    tail = [e for e in events if e.key == "rollout_tail"]
    assert tail and 100 <= tail[0].first_step <= 115
    assert all(e.key != "rollout_mismatch" for e in events)  # mean |Δ log p| ~0.03
    evidence = tail[0].evidence
    assert evidence["logprob_diff_p99"] >= 3 * evidence["logprob_diff_p99_start"]
    assert evidence["logprob_abs_diff_mean"] < 0.05
