"""signal_stopped: a signal the run logged for a while stops arriving while the run goes on."""

from __future__ import annotations

import json
import random
from typing import Any

from rlguard_backend.stability import AlertEvent, DetectorSuite
from tests.detectors.scenarios import Step, base_config, healthy, s10, s10b, verl_probs

VERL_KEYS = [
    "training/rollout_actor_probs_pearson_corr",
    "training/rollout_probs_diff_max",
    "training/rollout_probs_diff_mean",
]


def stopped_events(run: list[Step], config: dict[str, Any] | None = None) -> list[AlertEvent]:
    suite = DetectorSuite(base_config(300) if config is None else config)
    events = [event for step, values in run for event in suite.feed(step, values)]
    return [event for event in events if event.detector == "signal_stopped"]


def test_signal_stopped_warns_naming_the_family_and_its_last_step() -> None:
    events = stopped_events(s10(random.Random(0), 300))
    opened = events[0]
    assert (opened.key, opened.action, opened.severity) == ("signal_stopped", "open", "warn")
    assert opened.last_step == 169  # 20 steps fed without them, the first at 150
    assert opened.evidence["stopped"] == dict.fromkeys(VERL_KEYS, 149)
    assert opened.evidence["families"] == {"mismatch": VERL_KEYS}
    assert opened.evidence["steps_fed_since"] == 20
    assert f"{', '.join(VERL_KEYS)} last at step 149" in opened.message
    assert "verl PR 7196" in opened.advice[0]
    # it stays open, refreshed every 50 steps, and never becomes an INFO
    assert [(e.action, e.last_step) for e in events[1:]] == [("update", 219), ("update", 269)]


def test_signal_stopped_resolves_when_the_signals_come_back() -> None:
    rng = random.Random(1)
    run = [
        (t, {**healthy(t, rng), **(verl_probs(rng) if not 100 <= t < 160 else {})})
        for t in range(300)
    ]
    events = stopped_events(run)
    assert [(e.action, e.last_step) for e in events] == [("open", 119), ("resolve", 160)]


def test_other_signal_stopped_is_info_for_a_signal_outside_the_stability_families() -> None:
    rng = random.Random(2)
    run = [(t, {**healthy(t, rng), **({"actor/lr": 1e-6} if t < 100 else {})}) for t in range(300)]
    events = stopped_events(run)
    assert [(e.key, e.severity, e.last_step) for e in events if e.action == "open"] == [
        ("other_signal_stopped", "info", 119)
    ]
    assert events[0].evidence["stopped"] == {"actor/lr": 99}
    assert "their panels end there" in events[0].message


def test_signal_stopped_judges_a_periodic_key_by_its_own_cadence() -> None:
    """A mismatch KL logged every 50 steps, like an evaluation: silent while it keeps that
    cadence; stopped only past 3x it (and 20 steps) once it is gone."""
    config = base_config(1000)

    def run(stop_at: int) -> list[Step]:
        rng = random.Random(3)
        steps = []
        for t in range(1000):
            values = healthy(t, rng)
            if t % 50 == 0 and t < stop_at:
                values["rollout_corr/k3_kl"] = 1e-4
            steps.append((t, values))
        return steps

    assert stopped_events(run(1000), config) == []
    events = stopped_events(run(600), config)  # last at 550, its 10th point
    assert (events[0].key, events[0].last_step) == ("signal_stopped", 701)  # 550 + 3 x 50 + 1
    assert events[0].evidence["cadence_steps"] == {"rollout_corr/k3_kl": 50}


def test_signal_stopped_silent_at_the_runs_end() -> None:
    """Past planned_steps (a final evaluation logs other keys) nothing has stopped; without a
    plan, a last stretch shorter than 20 steps is not enough either."""
    rng = random.Random(4)
    trained = [(t, healthy(t, rng)) for t in range(200)]
    evaluation = [(t, {"response_length/mean": 300.0}) for t in range(200, 260)]
    assert stopped_events(trained + evaluation, base_config(200)) == []
    unplanned = {k: v for k, v in base_config(200).items() if k != "planned_steps"}
    assert stopped_events(trained + evaluation[:19], unplanned) == []
    assert stopped_events(trained + evaluation[:20], unplanned)[0].last_step == 219


def test_signal_stopped_silent_for_a_signal_logged_only_briefly() -> None:
    rng = random.Random(5)
    run = [(t, {**healthy(t, rng), **(verl_probs(rng) if t < 9 else {})}) for t in range(300)]
    assert stopped_events(run) == []


def test_signal_stopped_silent_on_uneven_logging() -> None:
    """Bursty keys, a periodic key, jumps of the step counter and a short end (S10b)."""
    found = {seed: stopped_events(s10b(random.Random(seed), 300)) for seed in range(50)}
    assert found == {seed: [] for seed in range(50)}


def test_signal_stopped_resumes_from_its_stored_state() -> None:
    run = s10(random.Random(6), 300)
    config = base_config(300)
    whole = DetectorSuite(config)
    expected = [event for step, values in run for event in whole.feed(step, values)]
    suite, events = DetectorSuite(config), []
    for index, (step, values) in enumerate(run):
        if index % 7 == 0:  # through JSON into a fresh suite, as another process would
            suite = DetectorSuite(config, state=json.loads(json.dumps(suite.dump_state())))
        events += suite.feed(step, values)
    assert events == expected
    assert any(event.detector == "signal_stopped" for event in expected)
