"""The MCP answers' shape and the tools' pure reckoning, table by table."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from rlguard_backend.mcp.answers import MAX_ANSWER_CHARS, compact, round_number, shrink
from rlguard_backend.mcp.health import signal_levels
from rlguard_backend.mcp.incident import config_differences, shift


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0.123456789, 0.1235),
        (123456.789, 123500.0),
        (1e-7 / 3, 3.333e-08),
        (2.0, 2),
        (-0.0, 0),
        (1e20, 1e20),
        (math.nan, "NaN"),
        (math.inf, "Infinity"),
        (-math.inf, "-Infinity"),
    ],
)
def test_answers_round_number(value: float, shown: Any) -> None:
    assert round_number(value) == shown


@pytest.mark.parametrize(
    ("value", "max_text", "max_items", "shown"),
    [
        ({"a": [1.23456, True, None]}, 10, 10, {"a": [1.235, True, None]}),
        ("abcdef", 3, 10, "abc…(+3 chars)"),
        (list(range(6)), 10, 4, [0, 1, 2, 3, "…(+2 more)"]),
        ({1: (0.5, "x")}, 10, 10, {"1": [0.5, "x"]}),
        ([{"deep": ["abcd" * 3]}], 4, 10, [{"deep": ["abcd…(+8 chars)"]}]),
    ],
)
def test_answers_shrink(value: Any, max_text: int, max_items: int, shown: Any) -> None:
    assert shrink(value, max_text, max_items) == shown


@pytest.mark.parametrize(
    "value",
    [
        {"runs": [{"id": f"run-{i}", "message": "m" * 300} for i in range(200)]},
        {"text": "\"'" * 50_000},
        [[0.1234567] * 1000 for _ in range(100)],
    ],
)
def test_answers_compact_stays_bounded_and_valid_json(value: Any) -> None:
    text = compact(value)
    assert len(text) <= MAX_ANSWER_CHARS
    json.loads(text)


def test_answers_compact_leaves_a_small_answer_whole() -> None:
    assert compact({"kl": 0.5, "steps": [1, 2]}) == '{"kl":0.5,"steps":[1,2]}'


@pytest.mark.parametrize(
    ("values", "config", "clipfrac"),
    [
        ({"last.clipfrac": 0.01}, {}, "ok"),
        ({"last.clipfrac": 0.1}, {}, "warn"),
        ({"last.clipfrac": 0.3}, {}, "critical"),
        ({"last.clipfrac": 0.1}, {"rlguard_thresholds": {"clipfrac.warn": 0.2}}, "ok"),
        ({"last.clipfrac": 0.1}, {"rlguard_thresholds": {"nonsense": 1}}, "warn"),  # defaults
        ({"last.clipfrac": "NaN"}, {}, "not a number"),
    ],
)
def test_health_signal_levels(
    values: dict[str, Any], config: dict[str, Any], clipfrac: str
) -> None:
    assert signal_levels(values, config)["clipfrac"]["level"] == clipfrac


def test_health_signal_levels_lower_limits_and_relative_signals() -> None:
    levels = signal_levels({"last.rollout_is_ess": 0.3, "last.entropy": 0.2}, {})
    assert levels["rollout_is_ess"] == {
        "last": 0.3,
        "alerts": "below",
        "warn": 0.5,
        "critical": 0.2,
        "level": "warn",
    }
    assert set(levels["entropy"]) == {"last", "rule"} and "clipfrac" not in levels


@pytest.mark.parametrize(
    ("steps", "values", "onset", "moved"),
    [
        ([1, 2, 3, 4], [1.0, 1.0, 3.0, 3.0], 3, {"before": 1.0, "after": 3.0, "score": 2000.0}),
        ([1, 2, 3, 4], [1.0, 3.0, 2.0, 2.0], 3, {"before": 2.0, "after": 2.0, "score": 0.0}),
        ([1, 2, 3], ["NaN", 2.0, 4.0], 3, {"before": 2.0, "after": 4.0, "score": 1000.0}),
        ([3, 4], [1.0, 2.0], 3, None),  # nothing before the onset
        ([1, 2], [1.0, 2.0], 3, None),  # nothing from it
    ],
)
def test_incident_shift(steps: list[int], values: list[Any], onset: int, moved: Any) -> None:
    found = shift(steps, values, onset)
    assert found == (moved and pytest.approx(moved))


def test_incident_config_differences_are_flattened_keys() -> None:
    mine = {"lr": 1e-3, "actor": {"clip": 0.2, "epochs": 4}, "seed": 0}
    theirs = {"lr": 1e-4, "actor": {"clip": 0.2}, "seed": 0, "beta": 0.1}
    assert config_differences(mine, theirs) == {
        "actor.epochs": [4, None],
        "beta": [None, 0.1],
        "lr": [1e-3, 1e-4],
    }
