"""Determinism and resumability: splitting a run anywhere through dump_state() and JSON gives
exactly the events of one uninterrupted pass."""

from __future__ import annotations

import json
import math

import pytest

from rlguard_backend.stability import DetectorSuite
from rlguard_backend.stability.suite import STATE_VERSION

from .scenarios import SCENARIOS, Scenario

SEED = 3


def events_in_one_pass(scenario: Scenario) -> list:
    suite = DetectorSuite(scenario.config)
    return [event for step, values in scenario.run(SEED) for event in suite.feed(step, values)]


def events_split_every(scenario: Scenario, k: int) -> list:
    suite, events = DetectorSuite(scenario.config), []
    for index, (step, values) in enumerate(scenario.run(SEED)):
        if index % k == 0:
            state = json.loads(json.dumps(suite.dump_state(), allow_nan=False))
            suite = DetectorSuite(scenario.config, state=state)
        events += suite.feed(step, values)
    return events


# Splitting at every step is the strongest check but costs a restore per step: run it on the
# scenarios whose alerts exercise the most state (EMAs, lookbacks, streaks, the controller).
EVERY_STEP = ("S2_early_collapse", "S7_clip_saturation", "S8_nan", "S9c_units_mismatch")
CASES = [(s, 1) for s in SCENARIOS if s.name in EVERY_STEP] + [
    (s, k) for s in SCENARIOS for k in (7, 50)
]


@pytest.mark.parametrize(("scenario", "k"), CASES, ids=[f"{s.name}-every{k}" for s, k in CASES])
def test_suite_events_identical_when_split_every_k_steps(scenario: Scenario, k: int) -> None:
    assert events_split_every(scenario, k) == events_in_one_pass(scenario)


@pytest.mark.parametrize("dropped", ["frac_reward_zero_std", "response_length/clip_ratio"])
def test_suite_events_identical_when_split_every_step_with_a_smoothed_signal_missing(
    dropped: str,
) -> None:
    """verl logs no zero-std fraction: the usual step then updates the other six EMAs at once.
    A restore before every step takes the one-at-a-time path instead; both must agree."""
    scenario = next(s for s in SCENARIOS if s.name == "S2_early_collapse")
    run = [
        (step, {k: v for k, v in values.items() if k != dropped})
        for step, values in scenario.run(SEED)
    ]
    one_pass, split = DetectorSuite(scenario.config), DetectorSuite(scenario.config)
    events_one, events_split = [], []
    for step, values in run:
        events_one += one_pass.feed(step, values)
        state = json.loads(json.dumps(split.dump_state(), allow_nan=False))
        split = DetectorSuite(scenario.config, state=state)
        events_split += split.feed(step, values)
    assert events_one and events_one == events_split
    assert one_pass.dump_state() == split.dump_state()


def test_suite_events_nonempty_in_split_test_scenarios() -> None:
    # The split test would be vacuous on runs without alerts: most scenarios must alert.
    alerting = [s.name for s in SCENARIOS if events_in_one_pass(s)]
    assert len(alerting) >= 9


def test_suite_feed_ignores_steps_already_processed() -> None:
    scenario = SCENARIOS[7]  # S7 alerts from step ~80
    suite = DetectorSuite(scenario.config)
    run = scenario.run(SEED)
    for step, values in run:
        suite.feed(step, values)
    before = suite.dump_state()
    nan_values = {key: math.nan for key in run[0][1]}
    assert suite.feed(run[-1][0], nan_values) == []
    assert suite.feed(0, nan_values) == []
    assert suite.dump_state() == before
    assert suite.last_step == run[-1][0]


def test_suite_dump_state_is_strict_json_with_non_finite_inputs() -> None:
    scenario = next(s for s in SCENARIOS if s.name == "S8_nan")
    suite = DetectorSuite(scenario.config)
    for step, values in scenario.run(SEED):
        suite.feed(step, values)
    json.dumps(suite.dump_state(), allow_nan=False)


def test_suite_dump_state_keeps_non_finite_state_values_exactly() -> None:
    """Plain floats in state (an overflowed EMA or sum, a detector's own numbers) survive
    strict JSON and come back as they were; the dump is a copy the suite does not touch."""
    scenario = SCENARIOS[0]
    suite = DetectorSuite(scenario.config)
    for step, values in scenario.run(SEED)[:100]:
        suite.feed(step, values)
    observations = suite._observations
    controller = next(d for d in suite._detectors if d.id == "kl_controller")
    entropy = next(d for d in suite._detectors if d.id == "entropy_collapse")
    observations.view.smoothed["reward_mean"] = math.inf
    observations.reward_high = -math.inf
    controller.largest_step_change = math.inf
    entropy.fit_sums = [5.0, math.nan, 1.0, math.inf, 2.0]
    dumped = suite.dump_state()
    text = json.dumps(dumped, allow_nan=False)
    entropy.fit_sums[0] = 6.0  # the dump does not follow the live state
    assert json.dumps(dumped, allow_nan=False) == text
    restored = DetectorSuite(scenario.config, state=json.loads(text))
    assert restored._observations.view.smoothed["reward_mean"] == math.inf
    assert restored._observations.reward_high == -math.inf
    restored_controller = next(d for d in restored._detectors if d.id == "kl_controller")
    restored_entropy = next(d for d in restored._detectors if d.id == "entropy_collapse")
    assert restored_controller.largest_step_change == math.inf
    sums = restored_entropy.fit_sums
    assert sums[0] == 5.0 and math.isnan(sums[1]) and sums[3] == math.inf and sums[4] == 2.0


def test_suite_dump_state_size_bounded_regardless_of_run_length() -> None:
    scenario = SCENARIOS[0]
    suite = DetectorSuite(scenario.config)
    sizes = {}
    for step, values in scenario.generate(__import__("random").Random(SEED), 3000):
        suite.feed(step, values)
        if step in (299, 2999):
            sizes[step] = len(json.dumps(suite.dump_state()))
    assert sizes[2999] <= sizes[299] * 1.2


def test_suite_events_json_serialisable_strictly() -> None:
    scenario = next(s for s in SCENARIOS if s.name == "S8_nan")
    events = events_in_one_pass(scenario)
    assert events
    for event in events:
        json.dumps(event.evidence, allow_nan=False)


def test_suite_init_rejects_state_of_other_version() -> None:
    with pytest.raises(ValueError, match="version"):
        DetectorSuite(state={"version": 999})


def test_suite_init_rejects_state_of_the_previous_version() -> None:
    """A state of version 13 (no signal_stopped, no tail signals) is not half-read: the caller
    is told to drop it, and the service rebuilds from the stored steps."""
    scenario = next(s for s in SCENARIOS if s.name == "S4_runaway_kl")
    suite = DetectorSuite(scenario.config)
    suite.feed_many(scenario.run(SEED)[:80])
    state = json.loads(json.dumps(suite.dump_state()))
    assert state["version"] == STATE_VERSION == 14
    state["version"] = 13
    del state["detectors"]["signal_stopped"]
    with pytest.raises(ValueError, match="version 13 is not 14; drop the stored state"):
        DetectorSuite(scenario.config, state=state)


def test_suite_readable_keeps_what_feed_reads_and_nothing_else() -> None:
    """A pending step is stored as readable() leaves it: feeding that alone must give the same
    events and state as feeding the whole step, system metrics and unknown keys included."""
    scenario = next(s for s in SCENARIOS if s.name == "S2_early_collapse")
    whole, trimmed = DetectorSuite(scenario.config), DetectorSuite(scenario.config)
    events_whole, events_trimmed = [], []
    for step, values in scenario.run(SEED):
        values = {**values, "system/gpu0/util": 97.0, "timing_s/gen": 12.5, "custom/x": 1.0}
        kept = trimmed.readable(values)
        assert "actor/entropy" in kept and "critic/score/mean" in kept
        assert not {"system/gpu0/util", "timing_s/gen", "custom/x"} & kept.keys()
        events_whole += whole.feed(step, values)
        events_trimmed += trimmed.feed(step, kept)
    assert events_whole and events_whole == events_trimmed
    assert whole.dump_state() == trimmed.dump_state()
