"""What detectors say (Verdict, per step) and what the suite emits (AlertEvent, on change)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Severity = Literal["info", "warn", "critical"]
Action = Literal["open", "update", "escalate", "resolve"]

SEVERITY_RANK: dict[str, int] = {"info": 0, "warn": 1, "critical": 2}


def weaker(severity: Severity) -> Severity:
    """One level down, for rules whose run context is missing (critical -> warn -> info)."""
    return "warn" if severity == "critical" else "info"


@dataclass(frozen=True)
class AlertEvent:
    """A change of one alert: opened, refreshed, escalated or resolved at `last_step`."""

    detector: str
    key: str
    action: Action
    severity: Severity
    first_step: int
    last_step: int
    message: str
    evidence: dict[str, Any]
    advice: list[str]
    secondary: bool


@dataclass(slots=True)
class Verdict:
    """One alert key's state at one step: firing at `severity`, or not (and cleared or not)."""

    key: str
    severity: Severity | None = None
    cleared: bool = False
    message: str = ""
    evidence: dict[str, Any] | None = None
    advice: list[str] | None = None


class _ClearedVerdicts(dict[str, Verdict]):
    """key -> the verdict "not firing, and the clear rule holds", built on first use."""

    def __missing__(self, key: str) -> Verdict:
        verdict = self[key] = Verdict(key, cleared=True)
        return verdict


# What a rule says when its clear rule holds while its alert is open: ``CLEARED[key]``,
# shared instead of built per step. Never mutate these.
CLEARED: dict[str, Verdict] = _ClearedVerdicts()
