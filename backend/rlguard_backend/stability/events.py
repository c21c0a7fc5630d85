"""What detectors say (Verdict, per step), what the suite emits (AlertEvent, on change), and
the AlertBook between them, with the lifecycle of docs/detectors.md ("Alert lifecycle").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from rlguard_backend.stability.primitives import json_safe

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


class AlertBook:
    """Open alerts of one run; its state is a small dict keyed by "detector|key"."""

    def __init__(self, update_interval_steps: float) -> None:
        self.update_interval_steps = update_interval_steps
        self.open: dict[str, dict[str, Any]] = {}
        self.step = 0  # the step being fed (change)
        self._open_keys: dict[str, set[str]] = {}  # detector -> keys of its open alerts

    def open_keys(self, detector: str) -> set[str]:
        """The keys of `detector`'s open alerts: one live set, kept up to date in place."""
        return self._open_keys.setdefault(detector, set())

    def load(self, open_alerts: dict[str, dict[str, Any]]) -> None:
        """Replace the open alerts by a stored copy (and the per-detector key sets)."""
        self.open = {slot: dict(alert) for slot, alert in open_alerts.items()}
        for keys in self._open_keys.values():
            keys.clear()
        for slot in self.open:
            detector, _, key = slot.partition("|")
            self.open_keys(detector).add(key)

    def severity(self, detector: str, key: str) -> str | None:
        """Severity of the open alert (detector, key), or None when it is not open."""
        alert = self.open.get(slot_of(detector, key))
        return None if alert is None else alert["severity"]

    def apply(self, detector: str, verdict: Verdict, secondary: bool) -> AlertEvent | None:
        """The event this verdict causes at `self.step`, if any."""
        slot = slot_of(detector, verdict.key)
        alert = self.open.get(slot)
        if verdict.severity is None:  # its clear rule holds
            if alert is None:
                return None
            del self.open[slot]
            self.open_keys(detector).discard(verdict.key)
            return self._event(detector, verdict, alert, "resolve", secondary)
        action = self.change(slot, verdict.severity)
        if action is None:
            return None
        if alert is None:
            alert = self.open[slot] = {"severity": verdict.severity, "first_step": self.step}
            self.open_keys(detector).add(verdict.key)
        elif action == "escalate":
            alert["severity"] = verdict.severity
        alert["emitted_step"] = self.step
        return self._event(detector, verdict, alert, action, secondary)

    def change(self, slot: str, severity: str) -> Action | None:
        """What a verdict firing at `severity` this step does to the alert kept at `slot`
        (slot_of(detector, key)): the action apply() emits, or None (nothing changes)."""
        alert = self.open.get(slot)
        if alert is None:
            return "open"
        if SEVERITY_RANK[severity] > SEVERITY_RANK[alert["severity"]]:
            return "escalate"
        if self.step - alert["emitted_step"] >= self.update_interval_steps:
            return "update"
        return None

    def _event(
        self,
        detector: str,
        verdict: Verdict,
        alert: dict[str, Any],
        action: Action,
        secondary: bool,
    ) -> AlertEvent:
        return AlertEvent(
            detector=detector,
            key=verdict.key,
            action=action,
            severity=alert["severity"],
            first_step=alert["first_step"],
            last_step=self.step,
            message=verdict.message or f"Resolved at step {self.step}: {verdict.key} cleared.",
            evidence=json_safe(verdict.evidence or {}),
            advice=list(verdict.advice or ()),
            secondary=secondary,
        )


def slot_of(detector: str, key: str) -> str:
    """Where the open alert (detector, key) is kept in AlertBook.open."""
    return f"{detector}|{key}"
