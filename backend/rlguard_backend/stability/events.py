"""What detectors say (Verdict, per step) and what the suite emits (AlertEvent, on change)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Severity = Literal["info", "warn", "critical"]
Action = Literal["open", "update", "escalate", "resolve"]

SEVERITY_RANK: dict[str, int] = {"info": 0, "warn": 1, "critical": 2}


def capped(severity: Severity | None, degraded: bool) -> Severity | None:
    """One level weaker (critical -> warn -> info) when the rule runs on assumed context."""
    if severity is None or not degraded:
        return severity
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
    """What one rule says at one step: firing at `severity`, or (None) its clear rule resolves
    its open alert."""

    key: str
    severity: Severity | None = None
    message: str = ""
    evidence: dict[str, Any] | None = None
    advice: list[str] | None = None
