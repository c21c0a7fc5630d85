"""The run page's alert views: the timeline, an alert's detail with its buttons (pure)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from dash import dcc, html

from rlguard_backend.schemas import AlertPublic
from rlguard_frontend import ids
from rlguard_frontend.api_client import ApiError
from rlguard_frontend.figures import step_span


def status_text(alert: AlertPublic) -> str:
    """``open``, ``resolved``, or ``closed with the run`` when the run's end resolved it."""
    return "closed with the run" if alert.closed_with_run else alert.status


SEVERITY_ORDER = {"critical": 0, "warn": 1, "info": 2}
TIMELINE_MAX = 100  # a long run may hold thousands of (mostly resolved) alerts
ACTIONS: dict[str, dict[str, Any]] = {
    "acknowledge": {"acknowledged": True},
    "resolve": {"status": "resolved"},
}
READ_ONLY = (
    "Your token can only read: acknowledging and resolving alerts needs one with the write "
    "scope (an admin makes it with `rlguard token create --name NAME --scope write`)."
)


def action_failed(exc: ApiError) -> str:
    """The sentence shown where an acknowledge or resolve failed."""
    if exc.status_code == 403:
        return READ_ONLY
    return f"The alert could not be changed: {exc.detail}"


def timeline(alerts: list[AlertPublic]) -> list[Any]:
    """The run's alerts as a list, open and worst first (or a note that there are none)."""
    if not alerts:
        return [html.P("No alerts. The limiters look healthy.", className="empty")]
    ordered = sorted(
        alerts, key=lambda a: (a.status != "open", SEVERITY_ORDER[a.severity], a.first_step)
    )
    more = len(ordered) - TIMELINE_MAX
    tail = [html.P(f"… and {more} more alerts", className="hint")] if more > 0 else []
    return [
        html.Button(
            [
                html.Span(alert.severity, className=f"sev sev-{alert.severity}"),
                html.Span(alert.detector, className="detector"),
                html.Span(step_span(alert), className="steps"),
                html.Span(
                    status_text(alert) + (" · ack" if alert.acknowledged else ""),
                    className="astatus",
                ),
            ],
            id={"type": ids.ALERT_ITEM, "alert": alert.id},
            className=f"alert-item alert-{alert.status}",
        )
        for alert in ordered[:TIMELINE_MAX]
    ] + tail


def alert_detail(alert: AlertPublic, writable: bool = True) -> list[Any]:
    """One alert's message, evidence table and actions (those a read-only token cannot take
    left out, with the sentence saying why)."""
    evidence = [
        html.Tr([html.Th(str(k)), html.Td(json.dumps(v) if not isinstance(v, str) else v)])
        for k, v in alert.evidence.items()
    ]
    return [
        html.H4(
            [html.Span(alert.severity, className=f"sev sev-{alert.severity}"), " ", alert.detector]
        ),
        html.P(f"{step_span(alert)} · {status_text(alert)}", className="hint"),
        html.P(alert.message, className="alert-message"),
        html.H5("Evidence"),
        html.Table(evidence, className="evidence") if evidence else html.P("—"),
        html.H5("What to try"),
        html.Ul([html.Li(str(item)) for item in alert.advice]) if alert.advice else html.P("—"),
        html.Div(
            [*_buttons(alert, writable), samples_link(alert)],
            className="alert-actions",
        ),
    ]


def samples_link(alert: AlertPublic) -> dcc.Link:
    """The samples of the alert's steps, worst reward first; an open alert's run to the newest
    step, as its shading does (its ``last_step`` is only its last refresh)."""
    span = f"from={alert.first_step}"
    if alert.status != "open":
        span += f"&to={alert.last_step}"
    query = f"{span}&sort=reward&order=asc"
    return dcc.Link(
        "show samples",
        href=f"/runs/{alert.run_id}/samples?{query}",
        id={"type": ids.ALERT_SAMPLES, "alert": alert.id},
        className="button-small",
    )


def _buttons(alert: AlertPublic, writable: bool) -> list[Any]:
    """Acknowledge (it stays open) and resolve, for the alerts where they still apply."""
    wanted = {"acknowledge": not alert.acknowledged, "resolve": alert.status != "resolved"}
    if not writable:
        return [html.P(READ_ONLY, className="hint read-only")] if any(wanted.values()) else []
    return [
        html.Button(
            action,
            id={"type": ids.ALERT_ACTION, "alert": alert.id, "action": action},
            className="button-small",
        )
        for action, shown in wanted.items()
        if shown
    ]


def digest(alerts: list[AlertPublic]) -> str:
    """A short fingerprint of what the page shows of the alerts: the store the tick uploads."""
    shown = sorted(
        (a.id, a.status, a.severity, a.acknowledged, a.first_step, a.closed_with_run)
        for a in alerts
    )
    return hashlib.sha1(json.dumps(shown).encode(), usedforsecurity=False).hexdigest()[:16]
