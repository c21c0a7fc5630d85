"""What alerts say: numbers in words, ratios readable, sources linked, evidence read right."""

from __future__ import annotations

import math
import re

import pytest

from rlguard_backend.stability import DetectorSuite
from rlguard_backend.stability.nonfinite import ADVICE_NONFINITE, ADVICE_REWARD_BUG
from rlguard_backend.stability.primitives import times

from . import scenarios as sc
from .test_detectors import healthy_run, run_events

SEED = 11
AGENT_R1_30 = "https://github.com/AgentR1/Agent-R1/issues/30"


@pytest.mark.parametrize(
    ("ratio", "said"),
    [
        (3346.0, "3,346×"),
        (123456.7, "123,457×"),
        (999.6, "1,000×"),
        (12.345, "12.3×"),
        (2.0, "2×"),
        (1.5, "1.5×"),
        (0.25, "0.25×"),
        (0.012345, "0.0123×"),
    ],
)
def test_times_says_a_ratio_in_three_figures_with_thousands_grouped(
    ratio: float, said: str
) -> None:
    assert times(ratio) == said


def _degenerate_batch(reward: float, config: dict | None = None) -> list:
    """300 healthy steps, then every response truncated with the reward at `reward`."""
    run = healthy_run(steps=300)
    for _, values in run[200:]:
        values["response_length/clip_ratio"] = 1.0
        values["critic/score/mean"] = reward
    return run_events(config or sc.base_config(300), run)


def test_truncated_at_floor_is_a_length_alert_said_in_words_with_a_linked_source() -> None:
    event = next(e for e in _degenerate_batch(0.0) if e.key == "truncated_at_floor")
    assert (event.detector, event.severity, event.first_step) == ("length", "warn", 200)
    assert event.message == (
        "100% of the responses are truncated at step 200 while the reward (0) sits at the "
        "bottom of its range (0 to 1): a degenerate batch, often right before NaNs (as in "
        f"{AGENT_R1_30})."
    )
    assert (event.evidence["reward"], event.evidence["reward_floor"]) == (0.0, 0.02)


def test_truncated_at_floor_floor_follows_a_negative_reward_range() -> None:
    config = sc.base_config(300, reward_min=-1.0, reward_max=1.0)
    event = next(e for e in _degenerate_batch(-0.99, config) if e.key == "truncated_at_floor")
    assert "the reward (-0.99) sits at the bottom of its range (-1 to 1)" in event.message
    assert event.evidence["reward_floor"] == pytest.approx(-0.96)
    # -0.5 is the middle of [-1, 1], not its floor, though it is below 0.02
    assert not [e for e in _degenerate_batch(-0.5, config) if e.key == "truncated_at_floor"]


def test_truncated_at_floor_says_nothing_of_a_floor_the_reward_lies_below() -> None:
    """Rewards all at one negative value leave the assumed [0, 1] with no range of their own:
    no floor is known, so no alert claims one."""
    run = [(t, dict(values)) for t, values in healthy_run(steps=60)]
    for _, values in run:
        values["critic/score/mean"] = -1.0
        values["response_length/clip_ratio"] = 1.0
    config = sc.base_config(60, reward_min=None, reward_max=None)
    assert not [e for e in run_events(config, run) if e.key == "truncated_at_floor"]


def test_truncated_at_floor_runs_without_a_response_length() -> None:
    suite = DetectorSuite(sc.base_config(10))
    events = suite.feed(0, {"response_length/clip_ratio": 1.0, "critic/score/mean": 0.0})
    assert [(e.detector, e.key) for e in events] == [("length", "truncated_at_floor")]
    assert suite.missing()["length"] == "no response length logged: length rules disabled"


def test_pinned_at_clamp_names_its_values_in_words() -> None:
    run = healthy_run(overrides={(40, "actor/kl_loss"): 9.95})
    event = next(e for e in run_events(sc.base_config(300), run) if e.key == "pinned_at_clamp")
    assert "at step 40 (actor/kl_loss = 9.95): the k3" in event.message
    assert "{" not in event.message


def test_nonfinite_reward_alone_is_called_a_reward_function_bug() -> None:
    run = healthy_run(overrides={(50, "critic/score/mean"): math.nan})
    event = next(e for e in run_events(sc.base_config(300), run) if e.key == "nonfinite")
    assert event.message == (
        "Non-finite reward at step 50 (critic/score/mean=NaN) while the other training "
        "statistics are finite: a bug in the reward function, not corrupted parameters. Check "
        "it for a division by zero or NaN from parsing before the next update uses it."
    )
    assert event.advice == ADVICE_REWARD_BUG


def test_nonfinite_reward_with_a_nonfinite_loss_says_parameters_are_corrupted() -> None:
    run = healthy_run(
        overrides={(50, "critic/score/mean"): math.nan, (50, "actor/pg_loss"): math.nan}
    )
    event = next(e for e in run_events(sc.base_config(300), run) if e.key == "nonfinite")
    assert "Parameters are probably corrupted from this step on" in event.message
    assert event.advice == ADVICE_NONFINITE
    assert "https://github.com/volcengine/verl/issues/721" in " ".join(event.advice)


def test_kl_spike_says_its_ratio_to_the_usual_level_readably() -> None:
    scenario = next(s for s in sc.SCENARIOS if s.name == "S5_kl_spike")
    events = run_events(scenario.config, scenario.run(SEED))
    spike = next(e for e in events if e.key == "kl_spike")
    ratio = spike.evidence["ppo_kl"] / spike.evidence["typical_ppo_kl"]
    assert f"({times(ratio)} its usual level)" in spike.message
    assert re.search(r"\(\d{1,3}(,\d{3})*(\.\d+)?× its usual level\)", spike.message)
    grad = next(e for e in events if e.key == "grad_spike")
    assert re.search(r"\(\d[\d,.]*× its running median\)", grad.message)
