"""The presets behind two pictures of docs/detectors.md, trained for real on CPU, 2 seeds each.

Both are runs resumed at step 40 with a setting that breaks them, and each must raise its
alert inside a stated window after the detectors' 10-step warm-up:
- clip-saturation (one epoch of two minibatches, then 16 epochs): clipfrac WARN at 45 on
  seeds 0-4 (the clip fraction 0.1-0.3 from step 40 against a warn level of 0.05).
- fp16-overflow (fp16 autocast, then the learning rate x10^4): nonfinite CRITICAL at 40 on
  seeds 0-4, with the NaN policy loss the overflowing forward pass gives.
Each run trains only the steps its window needs: nothing in a step depends on later steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("torch")

from rlguard.demo import PRESETS
from rlguard.demo.parallel import train_jobs
from rlguard.demo.presets import RESUMED_PRESETS
from rlguard_backend.stability import AlertEvent, DetectorSuite

SEEDS = range(2)
PLANNED_STEPS = 200  # the detectors' warm-up is then 10 steps, as in `rlguard demo`
WINDOWS = {  # preset: (alert key, severity, first step allowed, last step allowed)
    "clip-saturation": ("clipfrac", "warn", 40, 50),
    "fp16-overflow": ("nonfinite", "critical", 40, 42),
}
# What the alert's evidence must show: the clip fraction over a warn level at its 0.05 floor (the
# baseline is ~0), and the policy loss the overflowing fp16 forward pass turned NaN.
SHOWS_THE_CAUSE: dict[str, Callable[[dict[str, Any]], bool]] = {
    "clip-saturation": lambda evidence: evidence["clipfrac"] > evidence["warn_threshold"] == 0.05,
    "fp16-overflow": lambda evidence: evidence["fields"]["actor/pg_loss"] == "NaN",
}
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def alerts() -> dict[tuple[str, int], list[AlertEvent]]:
    """(preset, seed) -> every event the detectors raise up to the end of its window."""
    runs = [(name, seed) for name in WINDOWS for seed in SEEDS]
    results = train_jobs([(name, WINDOWS[name][3], seed) for name, seed in runs], workers=2)
    found = {}
    for (name, seed), result in zip(runs, results, strict=True):
        suite = DetectorSuite(PRESETS[name].run_config(planned_steps=PLANNED_STEPS))
        found[name, seed] = suite.feed_many(enumerate(result.history, start=1))
    return found


def _opened(events: list[AlertEvent], key: str, severity: str) -> AlertEvent | None:
    return next((e for e in events if e.key == key and e.severity == severity), None)


def test_resumed_presets_are_the_pinned_ones() -> None:
    assert set(WINDOWS) == set(RESUMED_PRESETS)


@pytest.mark.parametrize("name", list(WINDOWS))
def test_resumed_presets_raise_their_alert_in_its_window(
    alerts: dict[tuple[str, int], list[AlertEvent]], name: str
) -> None:
    key, severity, first, last = WINDOWS[name]
    opened = {seed: _opened(alerts[name, seed], key, severity) for seed in SEEDS}
    steps = {seed: event and event.last_step for seed, event in opened.items()}
    assert all(step is not None and first <= step <= last for step in steps.values()), steps


@pytest.mark.parametrize("name", list(WINDOWS))
def test_resumed_presets_alert_evidence_shows_the_cause(
    alerts: dict[tuple[str, int], list[AlertEvent]], name: str
) -> None:
    key, severity, _, _ = WINDOWS[name]
    for seed in SEEDS:
        event = _opened(alerts[name, seed], key, severity)
        assert event is not None
        assert SHOWS_THE_CAUSE[name](event.evidence), (seed, event.evidence)
