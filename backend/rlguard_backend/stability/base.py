"""The Detector base class: thresholds, run context, and state dumped from attributes."""

from __future__ import annotations

import copy
from typing import Any, ClassVar

from rlguard_backend.stability.context import RunContext
from rlguard_backend.stability.events import Severity, Verdict, weaker
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.primitives import Persistent
from rlguard_backend.stability.thresholds import Thresholds

_CONFIG_ATTRIBUTES = frozenset({"context", "th"})


class Detector:
    """One detector of DETECTORS.md §3: evaluate() returns a Verdict per alert key per step.

    Everything a subclass stores on ``self`` (other than ``context`` and ``th``) is its
    streaming state: primitives from primitives.py or plain JSON values. Attributes named
    ``_*`` are caches derived from that state: never dumped (a subclass resets them on load).
    """

    id: ClassVar[str]
    keys: ClassVar[tuple[str, ...]]

    def __init__(self, context: RunContext, thresholds: Thresholds) -> None:
        self.context = context
        self.th = thresholds

    def evaluate(self, view: StepView) -> list[Verdict]:
        raise NotImplementedError

    def missing(self, seen: frozenset[str]) -> str | None:
        """Why this detector is degraded or disabled, or None when it runs fully."""
        return None

    def dump(self) -> dict[str, Any]:
        return {
            name: _dump(value)
            for name, value in vars(self).items()
            if name not in _CONFIG_ATTRIBUTES and not name.startswith("_")
        }

    def load(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            setattr(self, name, _load(getattr(self, name, None), value))


def _dump(value: Any) -> Any:
    if isinstance(value, Persistent):
        return value.dump()
    if isinstance(value, dict):
        return {key: _dump(item) for key, item in value.items()}
    return value  # copied by json_safe in DetectorSuite.dump_state


def _load(current: Any, state: Any) -> Any:
    """Load `state` into the primitives inside `current`; plain values are replaced."""
    if isinstance(current, Persistent):
        current.load(state)
        return current
    if isinstance(current, dict) and any(isinstance(v, Persistent) for v in current.values()):
        for key, item in state.items():
            current[key] = _load(current.get(key), item)
        return current
    return copy.deepcopy(state)


def capped(severity: Severity, degraded: bool) -> Severity:
    """The severity to report: one level weaker when the rule runs on assumed context."""
    return weaker(severity) if degraded else severity
