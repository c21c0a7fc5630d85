"""The detectors on each demo preset, trained for real on CPU.

The presets named healthy must raise no WARN or CRITICAL alert over their full length (200
steps) on 5 seeds; each failure preset must raise its own alert inside a stated window
(DETECTORS v2 §2) on seeds 0 and 1, training only until that window closes. The windows were
stated from 5 seeds or more (runaway-kl: 20) and held on all 5 in this file until the suite
grew past 15 minutes; the healthy presets keep their 5, as the issue asks.

Alerts changed on purpose (#15 §2), each by fixing the preset, not a rule: the rules fired on
what the runs really did.
- healthy: kl_spike WARN gone (seeds 1, 2, 4: one update at 0.028-0.045, x11-14 the running
  median, four updates per batch with KL-Cov's unclipped ratio) and kl_runaway WARN gone (seeds
  2, 3, 4: KL x1.6-3.8 over 50 steps while the reward trend stood still, t 0.7-1.7). Now two
  updates per batch, 16 prompts, a 70 %-right warm-up and beta 1.5: KL settles near 0.06.
  Then beta 1.75 (KL near 0.045): on an AVX-512 machine, whose CPU kernels round differently,
  seed 4 at beta 1.5 raised kl_runaway WARN (KL 0.035 -> 0.052 over steps 19-69, x1.50, reward
  flat over 30 points); over seeds 0-9 there, beta 1.5 left 9 clean, 2.0 left 8 (kl_penalty_strong
  on a seed whose reward barely rose, a kl_spike), 1.75 left all 10.
- adaptive-kl: kl_spike CRITICAL gone (seeds 0-3: single updates at 0.077-0.15, past 1.5x the
  0.05 budget at lr 3e-3) and kl_runaway WARN gone (seeds 0, 2, 3). Now lr 1e-3, two updates per
  batch, 16 prompts, horizon 400: beta dips while KL ramps up, then holds KL near 0.1.
- runaway-kl: kl_runaway WARN now opens on every seed (before: on 2 of 5, at KL's 0.5 level,
  while the reward rose 0.2 -> 0.6 and KL settled near 0.4, which is no runaway). Now the policy
  is too small to learn the sums (d = 8): KL climbs x1.9-110 in 50 steps while the reward gains
  at most 0.15; entropy_collapse may follow (it gives the same few answers to every prompt).
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from rlguard.demo import ALL, PRESETS
from rlguard.demo.presets import DETECTOR_PRESETS
from rlguard_backend.stability import AlertEvent, DetectorSuite
from tests.demo.demo_runs import DemoRuns

STEPS, SEEDS = 200, range(5)
HEALTHY = ("healthy", "adaptive-kl")
SEEDS_OF = {name: SEEDS if name in HEALTHY else range(2) for name in (*ALL, *DETECTOR_PRESETS)}
# The failure presets' windows (below), each with the step it must be raised by.
WINDOWS = [
    ("collapse", "entropy_collapse", "critical", 10, 40),
    ("entropy-blowup", "entropy_blowup", "warn", 15, 45),
    ("kl-too-strong", "kl_penalty_strong", "warn", 30, 120),
    # the growth rule needs 50 steps of KL history: first WARN seen at 55-116 (20 seeds)
    ("runaway-kl", "kl_runaway", "warn", 50, 130),
    # beta x10 at its maximum rate takes ~20 saturated steps (first WARN seen at 39, 40)
    ("kl-pinned", "kl_controller", "warn", 30, 60),
    # the engine's sync stops at step 30; 3 points of persistence
    ("rollout-mismatch", "rollout_mismatch", "warn", 30, 40),
]
# The healthy presets train their full length; a failure preset trains until its window closes
# (rounded up to a validation step), which gives the same history up to there: nothing in a step
# depends on the steps still to come, except the validation added at the very last step.
TRAINED = {name: STEPS for name in SEEDS_OF} | {
    name: min(STEPS, -(-last // PRESETS[name].val_every) * PRESETS[name].val_every)
    for name, _, _, _, last in WINDOWS
}
# 10 long runs and 12 short ones, two at a time in one pool (shared with the other demo tests).
pytestmark = pytest.mark.timeout(1200)
RANK = {"info": 0, "warn": 1, "critical": 2}


@pytest.fixture(scope="module")
def alerts(demo_runs: DemoRuns) -> dict[tuple[str, int], list[AlertEvent]]:
    """(preset, seed) -> every event the detectors raise over the steps trained."""
    runs = [(name, seed) for name, seeds in SEEDS_OF.items() for seed in seeds]
    results = demo_runs.train([(name, TRAINED[name], seed) for name, seed in runs])
    found = {}
    for (name, seed), result in zip(runs, results, strict=True):
        suite = DetectorSuite(PRESETS[name].run_config(planned_steps=STEPS))
        found[name, seed] = [
            event
            for step, metrics in enumerate(result.history, start=1)
            for event in suite.feed(step, metrics)
        ]
    return found


def _loud(events: list[AlertEvent]) -> list[tuple[str, str, int]]:
    return [(e.detector, e.key, e.last_step) for e in events if RANK[e.severity] >= 1]


def _first(events: list[AlertEvent], key: str, severity: str) -> int | None:
    reached = (e for e in events if e.key == key and RANK[e.severity] >= RANK[severity])
    return next((e.last_step for e in reached if e.action != "resolve"), None)


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_presets_raise_no_warning(
    alerts: dict[tuple[str, int], list[AlertEvent]], name: str
) -> None:
    assert {seed: _loud(alerts[name, seed]) for seed in SEEDS} == {seed: [] for seed in SEEDS}


@pytest.mark.parametrize(("name", "key", "severity", "first", "last"), WINDOWS)
def test_failure_presets_raise_their_alert_in_its_window(
    alerts: dict[tuple[str, int], list[AlertEvent]],
    name: str,
    key: str,
    severity: str,
    first: int,
    last: int,
) -> None:
    steps = {seed: _first(alerts[name, seed], key, severity) for seed in SEEDS_OF[name]}
    assert all(step is not None and first <= step <= last for step in steps.values()), steps
