"""DetectorSuite: feeds one run's steps to every detector and keeps their state resumable."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rlguard_backend.signals import keys_by_signal
from rlguard_backend.stability.clipfrac import ClipFraction
from rlguard_backend.stability.context import RunContext
from rlguard_backend.stability.entropy import EntropyCollapse, EntropyCovLeading
from rlguard_backend.stability.events import AlertBook, AlertEvent
from rlguard_backend.stability.kl_controller import KlController
from rlguard_backend.stability.kl_reference import KlPenalty, KlRunaway
from rlguard_backend.stability.kl_spike import KlSpike
from rlguard_backend.stability.learning_signal import LearningSignal
from rlguard_backend.stability.length import LengthHacking
from rlguard_backend.stability.moe_routing import MoeRouting
from rlguard_backend.stability.nonfinite import NonFinite
from rlguard_backend.stability.observations import Observations
from rlguard_backend.stability.primitives import restore_non_finite
from rlguard_backend.stability.rollout_mismatch import RolloutMismatch
from rlguard_backend.stability.rules import Detector, Rule
from rlguard_backend.stability.sample_quality import SampleQuality
from rlguard_backend.stability.signal_stopped import SignalStopped
from rlguard_backend.stability.staleness import Staleness
from rlguard_backend.stability.thresholds import resolve_thresholds

# D1 runs first so that everything it marks as corrupted is known before the others speak.
DETECTOR_TYPES: tuple[type[Detector], ...] = (
    NonFinite,
    EntropyCollapse,
    LearningSignal,
    EntropyCovLeading,
    KlRunaway,
    KlSpike,
    KlPenalty,
    ClipFraction,
    KlController,
    LengthHacking,
    RolloutMismatch,
    SampleQuality,
    Staleness,
    MoeRouting,
    SignalStopped,
)
# Every rule by its alert key: the one place each is defined.
RULES: dict[str, Rule[Any]] = {rule.key: rule for kind in DETECTOR_TYPES for rule in kind.rules}
# The one rule whose open CRITICAL alert makes the others secondary, as (detector id, key).
PRIMARY: tuple[str, str] = next(
    (kind.id, rule.key) for kind in DETECTOR_TYPES for rule in kind.rules if rule.primary
)
# 4: one RuleProgress per rule; 5: no_learning_signal a detector of its own; 6: D9's signals;
# 7: sample_quality; 8: D3 and D5 read one KL history (observations); 9: sample_quality's
# text signals smoothed with the others (observations); 10: the last per-update KLs
# (observations, for the jump D6 escalates on); 11: staleness and moe_routing, their signals
# smoothed (observations); 12: truncated_at_floor a rule of D8 (length); 13: D3 follows its
# reference's start and resets (kl_runaway state, the KL EMA restarting at a reset); 14: D9's
# tail signals, signal_stopped
STATE_VERSION = 14
MAX_CACHED_KEY_SETS = 64  # key sets planned per suite; a run logs one or a few
Logged = tuple[tuple[str, tuple[str, ...]], ...]  # each signal a step logged, with its raw keys


class DetectorSuite:
    """All stability detectors of one run.

    >>> suite = DetectorSuite({"updates_per_batch": 4, "kl_placement": "loss", "kl_coef": 0.001})
    >>> suite.feed(0, {"actor/entropy": 0.53, "critic/score/mean": 0.2})
    []
    >>> state = suite.dump_state()  # store it; DetectorSuite(config, state=state) continues
    """

    def __init__(
        self,
        run_config: Mapping[str, Any] | None = None,
        thresholds: Mapping[str, Any] | None = None,
        state: Mapping[str, Any] | None = None,
    ) -> None:
        self._context = RunContext.from_config(run_config)
        resolved = resolve_thresholds(thresholds, self._context.thresholds)
        self._alerts = AlertBook(resolved["common"]["update_interval_steps"])
        self._observations = Observations(self._context, resolved, self._alerts.change)
        self._detectors = [
            kind(self._context, resolved[kind.id], self._alerts.open_keys(kind.id))
            for kind in DETECTOR_TYPES
        ]
        self._last_step: int | None = None
        self._seen: set[str] = set()
        self._plans: dict[tuple[str, ...], _Plan] = {}
        # One object per set of logged signals (StepView.logged), shared by the plans that log
        # it: a pending step trimmed to readable() keys logs what the whole step did.
        self._logged: dict[Logged, Logged] = {}
        if state:
            self._load(restore_non_finite(state))

    @property
    def last_step(self) -> int | None:
        """The last step fed (None before the first)."""
        return self._last_step

    def feed(self, step: int, values: Mapping[str, float]) -> list[AlertEvent]:
        """Run every detector on one step of raw metrics; steps already seen are ignored."""
        if self._last_step is not None and step <= self._last_step:
            return []
        self._last_step = step
        plan = self._plan_of(tuple(values))
        canonical, sources = plan.canonical(values)
        self._seen.update(canonical)
        view = self._observations.observe(step, canonical, sources)
        view.logged = plan.logged
        alerts = self._alerts
        alerts.step = step
        events: list[AlertEvent] = []
        # Each detector's verdicts are applied before the next one runs (it may read them:
        # change(), open_keys). Usually no rule fires or clears: there are none.
        for detector in plan.detectors:
            for verdict in detector.evaluate(view):
                secondary = (detector.id, verdict.key) != PRIMARY and self._after_primary()
                event = alerts.apply(detector.id, verdict, secondary)
                if event is not None:
                    events.append(event)
        return events

    def feed_many(self, steps: Iterable[tuple[int, Mapping[str, float]]]) -> list[AlertEvent]:
        """feed() each step in order; all their events."""
        return [event for step, values in steps for event in self.feed(step, values)]

    def readable(self, values: Mapping[str, float]) -> dict[str, float]:
        """The entries of a step that feed() reads: those whose key maps to a signal.

        Feeding them alone gives the same events and state as feeding the whole step.
        """
        return {key: values[key] for key in self._plan_of(tuple(values)).read}

    def missing(self) -> dict[str, str]:
        """Detector id -> why it is degraded or disabled (missing signals or run context)."""
        seen = frozenset(self._seen)
        reasons = {detector.id: detector.missing(seen) for detector in self._detectors}
        return {name: reason for name, reason in reasons.items() if reason}

    def dump_state(self) -> dict[str, Any]:
        """Everything needed to continue this run elsewhere; JSON-safe and of bounded size.

        A fresh structure: every part's dump is a copy with non-finite floats as strings.
        """
        return {
            "version": STATE_VERSION,
            "last_step": self._last_step,
            "seen": sorted(self._seen),
            "observations": self._observations.dump(),
            "alerts": {slot: dict(alert) for slot, alert in self._alerts.open.items()},
            "detectors": {detector.id: detector.dump() for detector in self._detectors},
        }

    def _load(self, state: Mapping[str, Any]) -> None:
        if state.get("version") != STATE_VERSION:
            raise ValueError(
                f"detector state version {state.get('version')!r} is not {STATE_VERSION}; "
                "drop the stored state to restart the detectors from the next step"
            )
        self._last_step = state["last_step"]
        self._seen = set(state["seen"])
        self._observations.load(state["observations"])
        self._alerts.load(state["alerts"])
        for detector in self._detectors:
            detector.load(state["detectors"][detector.id])

    def _after_primary(self) -> bool:
        """Alerts raised while the primary rule's CRITICAL is open are secondary to it."""
        return self._alerts.severity(*PRIMARY) == "critical"

    def _plan_of(self, keys: tuple[str, ...]) -> _Plan:
        """The plan of a step's key set: steps repeat the same keys, so it is made once."""
        plan = self._plans.get(keys)
        if plan is None:
            plan = _Plan(keys, self._context.signal_aliases, self._detectors)
            if len(self._plans) < MAX_CACHED_KEY_SETS:
                self._plans[keys] = plan
                plan.logged = self._logged.setdefault(plan.logged, plan.logged)
        return plan


class _Plan:
    """How one set of raw keys maps onto canonical signals, and which detectors read them."""

    def __init__(
        self,
        keys: tuple[str, ...],
        aliases: Mapping[str, str | None] | None,
        detectors: list[Detector],
    ) -> None:
        # Each canonical signal with its raw keys, best first (user aliases, then table order).
        self.signals = tuple(keys_by_signal(keys, aliases).items())
        self.logged = tuple(sorted(self.signals))  # the same for the same keys in any order
        self.read = tuple(key for _, found in self.signals for key in found)
        names = {name for name, _ in self.signals}
        # A detector none of whose signals these keys carry has nothing to do on their steps.
        self.detectors = [
            d for d in detectors if d.reads is None or not d.reads.signals.isdisjoint(names)
        ]

    def canonical(self, values: Mapping[str, Any]) -> tuple[dict[str, float], dict[str, str]]:
        """The step's canonical values (the first key with a number, of each signal) and the
        raw key each came from."""
        canonical: dict[str, float] = {}
        sources: dict[str, str] = {}
        for name, keys in self.signals:
            for key in keys:
                value = values[key]
                if type(value) is not float:  # the usual case first: a float as it is
                    if isinstance(value, bool) or not isinstance(value, (int, float)):
                        continue
                    value = float(value)
                canonical[name], sources[name] = value, key
                break
        return canonical, sources
