"""Threshold overrides are bounded by their kind: a backtest can no longer divide by zero."""

from __future__ import annotations

import math
import re

import pytest

from rlguard_backend.stability.thresholds import (
    DEFAULTS,
    check_flat_overrides,
    overrides_schema,
    value_problem,
)


@pytest.mark.parametrize(
    ("default", "value", "refused"),
    [
        (50, 10, False),  # a count
        (50, 0, True),  # zero points: nothing to index
        (50, 0.5, True),  # half a point
        (50, 100_001, True),  # a window without end
        (50, True, True),  # a bool is no count
        (3, 1, False),  # a half-life of one step
        (0.4, 0.6, False),  # a ratio
        (0.4, 0.0, True),  # zero: a half-life or factor divides by it
        (0.4, -0.1, True),  # the other sign
        (0.4, math.inf, True),
        (0.4, math.nan, True),
        (0.4, 2e6, True),
        (0.4, "0.6", True),
        (-1.0, -0.5, False),  # a negative default keeps its sign
        (-1.0, 0.5, True),
    ],
)
def test_threshold_value_problem_by_the_kind_of_its_default(
    default: float, value: object, refused: bool
) -> None:
    assert bool(value_problem(default, value)) is refused


def test_threshold_flat_overrides_refuse_unknown_names_and_nested_maps() -> None:
    check_flat_overrides({"kl_spike.history_points": 20, "entropy_collapse.spent_ratio": 0.3})
    with pytest.raises(ValueError, match=re.escape("did you mean 'kl_spike.history_points'")):
        check_flat_overrides({"kl_spike.history_point": 20})
    with pytest.raises(ValueError, match="whole number from 1 to 100,000"):
        check_flat_overrides({"kl_spike.history_points": 0})
    with pytest.raises(ValueError):
        check_flat_overrides({"entropy_collapse": {"spent_ratio": 0.3}})


def test_threshold_schema_names_every_threshold_with_its_bounds() -> None:
    schema = overrides_schema()
    names = {f"{group}.{key}" for group, values in DEFAULTS.items() for key in values}
    assert set(schema["properties"]) == names and schema["additionalProperties"] is False
    assert schema["properties"]["kl_spike.history_points"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 100_000,
    }
