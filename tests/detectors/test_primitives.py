"""Streaming primitives against their plain definitions."""

from __future__ import annotations

import json
import random

import pytest

from rlguard_backend.schemas import start_level
from rlguard_backend.stability.primitives import (
    Baseline,
    Lookback,
    SortedWindow,
    median,
    pack_floats,
    pack_steps,
    unpack_floats,
    unpack_steps,
)


def test_sorted_window_median_matches_median_of_its_values() -> None:
    rng = random.Random(3)
    window = SortedWindow(50)
    for _ in range(500):
        window.push(rng.choice([0.0, -0.0, 1.0, rng.random()]))
        assert window.median() == median(list(window))


def test_lookback_reads_the_latest_point_at_or_before_the_lag() -> None:
    lookback = Lookback(20)
    for step in (0, 1, 2, 10, 30, 31, 55):
        lookback.push(step, float(step))
    assert lookback.ago(55, 20) == 31.0
    assert lookback.ago(55, 50) is None  # older points are gone
    assert lookback.steps[0] <= 55 - 20 < lookback.steps[1]


@pytest.mark.parametrize("values", [[], [0.1, -0.0, 1e-310, float("inf"), float("nan")]])
def test_packed_floats_round_trip_bit_for_bit_through_json(values: list[float]) -> None:
    back = unpack_floats(json.loads(json.dumps(pack_floats(values))))
    assert [v.hex() for v in back] == [v.hex() for v in values]


@pytest.mark.parametrize("steps", [[], [0, 1, 2**62], [1.5, 2.5]])
def test_packed_steps_round_trip_and_keep_non_int_steps_as_a_list(steps: list) -> None:
    assert unpack_steps(json.loads(json.dumps(pack_steps(steps)))) == steps


def test_baseline_streams_the_start_level_the_dashboard_computes() -> None:
    """One definition of a run's start: the detectors' streamed Baseline and the batch
    ``schemas.start_level`` the run page's guide uses agree, dense, sparse or with gaps."""
    rng = random.Random(5)
    for _ in range(300):
        steps = sorted(rng.sample(range(200), rng.randint(1, 12)))
        values = [rng.choice([rng.random(), None]) for _ in steps]
        baseline = Baseline()
        streamed = None
        for step, value in zip(steps, values, strict=True):
            if value is not None:
                streamed = baseline.update(step, value)
        assert streamed == start_level(steps, values), (steps, values)
