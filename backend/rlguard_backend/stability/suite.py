"""DetectorSuite: feeds one run's steps to every detector and keeps their state resumable."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from rlguard_backend.signals import ALIAS_PRIORITY, canonical_signal
from rlguard_backend.stability.base import Detector
from rlguard_backend.stability.clipfrac import ClipFraction
from rlguard_backend.stability.context import RunContext
from rlguard_backend.stability.entropy import EntropyCollapse
from rlguard_backend.stability.entropy_cov import EntropyCovLeading
from rlguard_backend.stability.events import AlertEvent, Severity
from rlguard_backend.stability.kl_controller import KlController
from rlguard_backend.stability.kl_penalty import KlPenalty
from rlguard_backend.stability.kl_reference import KlRunaway
from rlguard_backend.stability.kl_spike import KlSpike
from rlguard_backend.stability.length import LengthHacking
from rlguard_backend.stability.lifecycle import AlertBook
from rlguard_backend.stability.nonfinite import NonFinite
from rlguard_backend.stability.observations import Observations
from rlguard_backend.stability.primitives import json_safe
from rlguard_backend.stability.thresholds import resolve_thresholds

# D1 runs first so that everything it marks as corrupted is known before the others speak.
DETECTOR_TYPES: tuple[type[Detector], ...] = (
    NonFinite,
    EntropyCollapse,
    EntropyCovLeading,
    KlRunaway,
    KlSpike,
    KlPenalty,
    ClipFraction,
    KlController,
    LengthHacking,
)
STATE_VERSION = 2  # 2: streaks are plain ints
MAX_CACHED_KEY_SETS = 64  # key sets planned per suite; a run logs one or a few
_NON_FINITE_STRINGS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


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
        self._observations = Observations(self._context, resolved["common"])
        self._detectors = [kind(self._context, resolved[kind.id]) for kind in DETECTOR_TYPES]
        # Each detector with its alert key -> AlertBook slot ("detector|key").
        self._slotted = [
            (detector, _Slots(f"{detector.id}|{{}}".format)) for detector in self._detectors
        ]
        self._step = 0
        self._alerts = AlertBook(resolved["common"]["update_interval_steps"])
        self._last_step: int | None = None
        self._seen: set[str] = set()
        self._plans: dict[tuple[str, ...], _Plan] = {}
        if state:
            self._load(_restore_non_finite(state))

    @property
    def last_step(self) -> int | None:
        return self._last_step

    def feed(self, step: int, values: Mapping[str, float]) -> list[AlertEvent]:
        """Run every detector on one step of raw metrics; steps already seen are ignored."""
        if self._last_step is not None and step <= self._last_step:
            return []
        self._last_step = step
        canonical, sources, finite = self._canonical(values)
        self._seen.update(canonical)
        view = self._observations.observe(step, canonical, sources, finite)
        alerts = self._alerts
        open_alerts = alerts.open  # the same dict all step long
        view.emits = self._emits
        self._step = step
        events: list[AlertEvent] = []
        after_nan: bool | None = None
        for detector, slots in self._slotted:
            for verdict in detector.evaluate(view):
                if verdict.severity is None and (
                    not verdict.cleared or not open_alerts or slots[verdict.key] not in open_alerts
                ):
                    continue  # nothing to change: the cheap path of almost every step
                slot = slots[verdict.key]
                if slot == _PRIMARY_SLOT:
                    secondary = False
                else:
                    if after_nan is None:  # D1's own verdict came first: settled by now
                        after_nan = self._after_nan()
                    secondary = after_nan
                event = alerts.apply(detector.id, verdict, step, secondary)
                if event is not None:
                    events.append(event)
        return events

    def _emits(self, detector: str, key: str, severity: Severity) -> bool:
        """Whether a verdict firing at `severity` this step makes an event (see AlertBook)."""
        return self._alerts.emits(f"{detector}|{key}", severity, self._step)

    def missing(self) -> dict[str, str]:
        """Detector id -> why it is degraded or disabled (missing signals or run context)."""
        seen = frozenset(self._seen)
        reasons = {detector.id: detector.missing(seen) for detector in self._detectors}
        return {name: reason for name, reason in reasons.items() if reason}

    def dump_state(self) -> dict[str, Any]:
        """Everything needed to continue this run elsewhere; JSON-safe and of bounded size."""
        return json_safe(
            {
                "version": STATE_VERSION,
                "last_step": self._last_step,
                "seen": sorted(self._seen),
                "observations": self._observations.dump(),
                "alerts": dict(self._alerts.open),
                "detectors": {detector.id: detector.dump() for detector in self._detectors},
            }
        )

    def _load(self, state: Mapping[str, Any]) -> None:
        if state.get("version") != STATE_VERSION:
            raise ValueError(
                f"detector state version {state.get('version')!r} is not {STATE_VERSION}; "
                "drop the stored state to restart the detectors from the next step"
            )
        self._last_step = state["last_step"]
        self._seen = set(state["seen"])
        self._observations.load(state["observations"])
        self._alerts.open = {slot: dict(alert) for slot, alert in state["alerts"].items()}
        for detector in self._detectors:
            detector.load(state["detectors"][detector.id])

    def _plan(self, keys: tuple[str, ...]) -> _Plan:
        """For one set of raw keys: each canonical signal with its keys, best first."""
        aliases = self._context.signal_aliases
        candidates: dict[str, list[tuple[int, str]]] = {}
        for key in keys:
            name = canonical_signal(key, aliases)
            if name is not None:
                candidates.setdefault(name, []).append((_rank(key, aliases), key))
        ranked = {
            name: tuple(key for _, key in sorted(found)) for name, found in candidates.items()
        }
        singles = tuple((name, keys[0]) for name, keys in ranked.items() if len(keys) == 1)
        several = tuple((name, keys) for name, keys in ranked.items() if len(keys) > 1)
        return singles, several

    def _after_nan(self) -> bool:
        """Alerts raised while D1's non-finite CRITICAL is open are secondary to it."""
        return self._alerts.severity(*NonFinite.PRIMARY) == "critical"

    def _canonical(
        self, values: Mapping[str, float]
    ) -> tuple[dict[str, float], dict[str, str], dict[str, float]]:
        """Map raw keys to canonical signals; user aliases first, then table order.

        Returns the canonical values, the raw key each came from, and the finite values (the
        first dict itself when every value is finite). Steps repeat the same keys, so the
        key -> signal resolution is planned once per key set.
        """
        keys = tuple(values)
        plan = self._plans.get(keys)
        if plan is None:
            plan = self._plan(keys)
            if len(self._plans) < MAX_CACHED_KEY_SETS:
                self._plans[keys] = plan
        singles, several = plan
        canonical: dict[str, float] = {}
        sources: dict[str, str] = {}
        all_finite = True
        for name, key in singles:  # the usual case: one key per signal
            value = values[key]
            if type(value) is not float:
                value = _as_float(value)  # type: ignore[assignment]
                if value is None:
                    continue
            canonical[name] = value
            sources[name] = key
            if value - value != 0.0:  # 0.0 only for finite x; NaN and ±inf give NaN
                all_finite = False
        for name, candidates in several:
            for key in candidates:
                choice = _as_float(values[key])
                if choice is not None:
                    canonical[name] = choice
                    sources[name] = key
                    if choice - choice != 0.0:
                        all_finite = False
                    break
        if all_finite:
            return canonical, sources, canonical
        finite = {name: value for name, value in canonical.items() if value - value == 0.0}
        return canonical, sources, finite


class _Slots(dict[str, str]):
    """Alert key -> AlertBook slot, filled on first use."""

    def __init__(self, slot_of: Callable[[str], str]) -> None:
        super().__init__()
        self._slot_of = slot_of

    def __missing__(self, key: str) -> str:
        slot = self[key] = self._slot_of(key)
        return slot


_PRIMARY_SLOT = "|".join(NonFinite.PRIMARY)
# (signals with one raw key: (name, key), ...), (signals with several: (name, keys best first))
_Plan = tuple[tuple[tuple[str, str], ...], tuple[tuple[str, tuple[str, ...]], ...]]


def _rank(key: str, aliases: Mapping[str, str | None] | None) -> int:
    """User aliases beat the table; within the table, the order of METRICS.md keys."""
    return -1 if aliases and key in aliases else ALIAS_PRIORITY.get(key, len(ALIAS_PRIORITY))


def _as_float(raw: Any) -> float | None:
    if type(raw) is float:
        return raw
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        return None
    return float(raw)


def _restore_non_finite(value: Any) -> Any:
    """Inverse of json_safe for the strings it writes."""
    if isinstance(value, str):
        return _NON_FINITE_STRINGS.get(value, value)
    if isinstance(value, Mapping):
        return {key: _restore_non_finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_restore_non_finite(item) for item in value]
    return value
