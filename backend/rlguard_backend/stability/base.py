"""The Detector base class: thresholds, run context, and state dumped from attributes."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from rlguard_backend.stability.columns import (
    NOT_QUIET,
    Bools,
    Columns,
    Ints,
    Quiet,
    counting,
    first,
)
from rlguard_backend.stability.context import RunContext
from rlguard_backend.stability.events import SEVERITY_RANK, Severity, Verdict, weaker
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.primitives import Persistent, Window, json_safe
from rlguard_backend.stability.thresholds import Thresholds

_CONFIG_ATTRIBUTES = frozenset({"context", "th", "open_keys"})
_STATEFUL = (Persistent, Window)


class Detector:
    """One detector of DETECTORS.md §3.

    evaluate() returns what each rule it ran says at this step: a Verdict when the rule fires,
    ``CLEARED[key]`` when its clear rule holds while its alert is open (``key in
    self.open_keys``), and None otherwise: the usual step of a healthy run says nothing.

    Everything a subclass stores on ``self`` (other than ``context``, ``th`` and
    ``open_keys``) is its streaming state: primitives from primitives.py or plain JSON values.
    Attributes named ``_*`` are settings or caches derived from the thresholds, the context or
    that state: never dumped (a subclass rebuilds caches on load).
    """

    id: ClassVar[str]
    keys: ClassVar[tuple[str, ...]]
    # Canonical signals a run must log at least one of for evaluate() to do anything; None:
    # it runs on every step (some of its rules count steps without their signal).
    reads: ClassVar[frozenset[str] | None] = None

    def __init__(
        self, context: RunContext, thresholds: Thresholds, open_keys: set[str] | None = None
    ) -> None:
        self.context = context
        self.th = thresholds
        # Keys of this detector's open alerts, kept up to date by the suite's AlertBook.
        self.open_keys: set[str] = set() if open_keys is None else open_keys

    def evaluate(self, view: StepView) -> Sequence[Verdict | None]:
        raise NotImplementedError

    def quiet_prefix(self, cols: Columns) -> Quiet:
        """How many leading steps of `cols` this detector is certainly silent for (no rule
        fires, no open alert clears), and how to advance its state over them; it changes
        nothing itself. The default has no column-wise path: every step goes through feed()."""
        return NOT_QUIET

    def missing(self, seen: frozenset[str]) -> str | None:
        """Why this detector is degraded or disabled, or None when it runs fully."""
        return None

    def dump(self) -> dict[str, Any]:
        attributes = vars(self)
        names = self.__dict__.get("_state_names")
        if names is None or len(attributes) != names[0]:  # attributes added since: again
            names = (len(attributes) + 1, self._names_of_state(attributes))
            self._state_names = names
        return {name: _dump(attributes[name]) for name in names[1]}

    @staticmethod
    def _names_of_state(attributes: dict[str, Any]) -> tuple[str, ...]:
        return tuple(
            name
            for name in attributes
            if name not in _CONFIG_ATTRIBUTES and not name.startswith("_")
        )

    def load(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            setattr(self, name, _load(getattr(self, name, None), value))


class Stops:
    """Where a detector's rules speak in some columns, kept with its Quiet (as `again`): once
    feed() has taken the step where one spoke, the detector's state is where the columns'
    arrays say, and only the alert book changed, so the next such step comes from the same
    arrays. Steps whose verdicts the arrays cannot tell (`unknown`) end that.

    A rule speaks where it fires with no alert open, escalates, refreshes its open alert (every
    update_interval_steps while it fires) or clears. A refresh that a later refresh or
    escalation in the same arrays rewrites is not a stop: the columns' advance only moves the
    alert's emitted step (DetectorSuite.feed_many leaves that "update" out; latest_updates).
    """

    def __init__(self, detector: Detector, cols: Columns) -> None:
        self._detector, self._cols = detector, cols
        self._rules: list[tuple[str, Bools, int | Ints, Bools]] = []
        self.unknown = cols.n  # the first step these arrays cannot tell: feed() decides
        # rule key -> (index, step) of its refreshes left out before its stop, in order
        self._silent: dict[str, list[tuple[int, int]]] = {}

    def rule(self, key: str, firing: Bools, rank: int | Ints, settled: Bools) -> None:
        """A rule: where it fires, at which severity (SEVERITY_RANK), and where its clear rule
        holds (`settled`, on a step it does not fire) to resolve its open alert."""
        self._rules.append((key, firing, rank, settled))

    def clears(self, key: str, quiet: Ints | int) -> None:
        """A rule that cannot fire here, whose open alert clears once its quiet steps reach
        clear_steps: `quiet` after each step, or (an int) before the first, one more each
        step. With its alert not open it has nothing to say here."""
        if key not in self._detector.open_keys:
            return
        cols = self._cols
        after = counting(quiet, cols.n) if isinstance(quiet, int) else quiet
        never = np.zeros(cols.n, dtype=np.bool_)
        self.rule(key, never, 0, after >= self._detector.th["clear_steps"])

    def cannot_tell(self, at: int) -> None:
        """Steps from `at` on are left to feed()."""
        self.unknown = min(self.unknown, at)

    def first(self, offset: int = 0) -> int:
        """The first step from `offset` on where a rule speaks or the arrays cannot tell."""
        at = self.unknown
        self._silent = {}
        for key, firing, rank, settled in self._rules:
            at = min(at, self._speaks(key, firing, rank, settled, offset))
        return at

    def _speaks(self, key: str, firing: Bools, rank: int | Ints, settled: Bools, at: int) -> int:
        cols = self._cols
        alert = cols.alerts.open.get(f"{self._detector.id}|{key}")
        if alert is None:
            return _first_from(firing, at)  # it opens
        escalates = _first_from(firing & (rank > SEVERITY_RANK[alert["severity"]]), at)
        known = min(_first_from(settled & ~firing, at), self.unknown)  # no resolve before
        end = min(escalates, known)
        # Its refreshes before then, each update_interval_steps after the one before.
        interval, emitted = cols.alerts.update_interval_steps, alert["emitted_step"]
        refreshes: list[int] = []
        while at < end:
            due = int(np.searchsorted(cols.steps, emitted + interval))
            at = _first_from(firing, max(at, due))
            if at >= end:
                break
            refreshes.append(at)
            emitted, at = cols.step_list[at], at + 1
        if not refreshes:
            return end
        if escalates < known:  # the escalation rewrites the last refresh too
            silent, stop = refreshes, escalates
        else:
            silent, stop = refreshes[:-1], refreshes[-1]
        if silent:
            self._silent[key] = [(index, cols.step_list[index]) for index in silent]
        return stop

    def again(self, offset: int) -> int | None:
        """Quiet.again: None once feed() has taken a step these arrays cannot tell."""
        return None if offset > self.unknown else self.first(offset)

    def quiet(self, advance: Callable[[int, int], None]) -> Quiet:
        def moved(begin: int, end: int) -> None:
            advance(begin, end)
            if self._silent:
                self._refreshed(end)

        return Quiet(self.first(), moved, self.again)

    def _refreshed(self, end: int) -> None:
        """Move each open alert's emitted step to its last refresh left out before `end`."""
        book = self._cols.alerts
        for key, silent in self._silent.items():
            alert = book.open.get(f"{self._detector.id}|{key}")
            for index, step in reversed(silent):
                if index < end:
                    if alert is not None and step > alert["emitted_step"]:
                        alert["emitted_step"] = step
                    break


def _first_from(mask: Bools, offset: int) -> int:
    """Index of the first True from `offset` on, or len(mask) when there is none."""
    return first(mask[offset:]) + offset if offset else first(mask)


def _dump(value: Any) -> Any:
    """A state attribute as JSON takes it: a copy, with non-finite floats as strings."""
    if type(value) is int or value is None:  # streaks and counters, most of the state
        return value
    if isinstance(value, _STATEFUL):
        return value.dump()
    if isinstance(value, dict):
        return {key: _dump(item) for key, item in value.items()}
    if isinstance(value, (float, list, tuple)):
        return json_safe(value)
    return value  # int, bool, str, None


def _load(current: Any, state: Any) -> Any:
    """Load `state` into the primitives inside `current`; plain values are replaced."""
    if isinstance(current, _STATEFUL):
        current.load(state)
        return current
    if isinstance(current, dict) and any(isinstance(v, _STATEFUL) for v in current.values()):
        for key, item in state.items():
            current[key] = _load(current.get(key), item)
        return current
    return copy.deepcopy(state)


def capped(severity: Severity, degraded: bool) -> Severity:
    """The severity to report: one level weaker when the rule runs on assumed context."""
    return weaker(severity) if degraded else severity
