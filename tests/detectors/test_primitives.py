"""Streaming primitives against their plain definitions."""

from __future__ import annotations

import json
import random

import pytest

from rlguard_backend.stability.primitives import (
    Lookback,
    RiseBound,
    SortedWindow,
    fit_line,
    median,
    pack_floats,
    pack_steps,
    unpack_floats,
    unpack_steps,
)

POINTS = 30


@pytest.mark.parametrize("scale", [1e-300, 1e-3, 1.0, 1e6, 1e150])
def test_rise_bound_never_below_the_exact_fitted_rise(scale: float) -> None:
    rng = random.Random(7)
    bound, steps, values = RiseBound(POINTS), [], []
    step, checked = 0, 0
    for _ in range(3000):
        step += 1 if rng.random() > 0.01 else rng.randint(2, 40)  # an occasional gap
        steps.append(step)
        values.append(scale * (rng.gauss(0, 1) + 1e-3 * step))
        del steps[:-50], values[:-50]
        bound.push(steps, values)
        magnitude = max(abs(v) for v in values)
        upper = bound.rise(magnitude)
        line = fit_line(steps[-POINTS:], values[-POINTS:])
        if upper is not None and line is not None:
            assert upper >= line.fitted_rise
            assert upper - line.fitted_rise <= 1e-6 * POINTS * magnitude + 1e-290
            checked += 1
    assert checked > 2000


def test_rise_bound_unknown_until_enough_consecutive_points() -> None:
    bound, steps, values = RiseBound(5), [], []
    for step in (1, 2, 3, 4):
        steps.append(step)
        values.append(0.5)
        bound.push(steps, values)
        assert bound.rise(1.0) is None
    steps.append(9)
    values.append(0.5)
    bound.push(steps, values)
    assert bound.rise(1.0) is None


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
