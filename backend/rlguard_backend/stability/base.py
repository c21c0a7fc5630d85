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
    first,
)
from rlguard_backend.stability.context import RunContext
from rlguard_backend.stability.events import Severity, Verdict, weaker
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

    def speaks_at(
        self,
        cols: Columns,
        key: str,
        firing: Bools,
        rank: int | Ints,
        settled: Bools,
        offset: int = 0,
    ) -> int:
        """The first step of `cols` (from `offset` on) at which rule `key` says something: it
        fires at severity `rank` (SEVERITY_RANK) where the alert book emits, or its clear rule
        holds (`settled`, on a step it does not fire) while its alert is open; len(cols) when
        it never does."""
        emits = cols.emitting(self.id, key, firing, rank)
        at = first(emits[offset:] if offset else emits) + offset
        if key in self.open_keys:
            clears = settled & ~firing
            at = min(at, first(clears[offset:] if offset else clears) + offset)
        return at

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
    arrays. Steps whose verdicts the arrays cannot tell (`unknown`) end that."""

    def __init__(self, detector: Detector, cols: Columns) -> None:
        self._detector, self._cols = detector, cols
        self._rules: list[tuple[str, Bools, int | Ints, Bools]] = []
        self.unknown = cols.n  # the first step these arrays cannot tell: feed() decides

    def rule(self, key: str, firing: Bools, rank: int | Ints, settled: Bools) -> None:
        """A rule of Detector.speaks_at."""
        self._rules.append((key, firing, rank, settled))

    def clears(self, key: str, quiet: Ints) -> None:
        """A rule that cannot fire here, whose open alert clears once `quiet` (its quiet
        steps after each step) reaches clear_steps."""
        never = np.zeros(self._cols.n, dtype=np.bool_)
        self.rule(key, never, 0, quiet >= self._detector.th["clear_steps"])

    def cannot_tell(self, at: int) -> None:
        """Steps from `at` on are left to feed()."""
        self.unknown = min(self.unknown, at)

    def first(self, offset: int = 0) -> int:
        """The first step from `offset` on where a rule speaks or the arrays cannot tell."""
        at, detector, cols = self.unknown, self._detector, self._cols
        for key, firing, rank, settled in self._rules:
            at = min(at, detector.speaks_at(cols, key, firing, rank, settled, offset))
        return at

    def again(self, offset: int) -> int | None:
        """Quiet.again: None once feed() has taken a step these arrays cannot tell."""
        return None if offset > self.unknown else self.first(offset)

    def quiet(self, advance: Callable[[int, int], None]) -> Quiet:
        return Quiet(self.first(), advance, self.again)


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
