"""The alerts inbox: open alerts of every run and project, worst and oldest first, handled in bulk.

Each row links to its run's page; ticked rows are acknowledged (they stay open) or resolved
together.
"""

from __future__ import annotations

from collections.abc import Set
from typing import Any
from urllib.parse import quote

from dash import Dash, Input, Output, State, ctx, dcc, html
from dash.exceptions import PreventUpdate

from rlguard_backend.schemas import AlertPublic
from rlguard_frontend import ids, run_state
from rlguard_frontend.api_client import ApiClient, ApiError
from rlguard_frontend.components import run_commands
from rlguard_frontend.components.alert_views import (
    ACTIONS,
    READ_ONLY,
    SEVERITY_ORDER,
    action_failed,
)

SEVERITIES = ("critical", "warn", "info")


def layout(writable: bool = True) -> html.Div:
    """The inbox: severity choice, bulk buttons and the list (filled by its callback); for a
    read-only token, a sentence instead of the buttons."""
    hidden = {} if writable else {"display": "none"}
    return html.Div(
        [
            html.H2("Alerts inbox"),
            html.Div(
                [
                    dcc.Checklist(
                        id=ids.INBOX_SEVERITY,
                        options=list(SEVERITIES),
                        value=["critical", "warn"],
                        inline=True,
                    ),
                    *(
                        html.Button(label, id=button, className="button-small", style=hidden)
                        for label, button in (
                            ("acknowledge", ids.INBOX_ACKNOWLEDGE),
                            ("resolve", ids.INBOX_RESOLVE),
                        )
                    ),
                    run_commands.inbox_controls(hidden),
                    html.Span(id=ids.INBOX_COUNT, className="runs-count"),
                ],
                className="filters",
            ),
            *([] if writable else [html.P(READ_ONLY, id=ids.INBOX_READ_ONLY, className="hint")]),
            html.Div(id=ids.INBOX_ERROR, className="error"),
            dcc.Checklist(id=ids.INBOX_LIST, options=[], value=[], className="inbox-list"),
        ],
        className="inbox-page",
    )


def ordered(alerts: list[AlertPublic], severities: list[str]) -> list[AlertPublic]:
    """The open alerts of the chosen severities: worst first, then the longest open."""
    chosen = [a for a in alerts if a.status == "open" and a.severity in severities]
    return sorted(chosen, key=lambda a: (SEVERITY_ORDER[a.severity], a.created_at))


def row(alert: AlertPublic) -> dict[str, Any]:
    """A checklist option: the alert as text and links (never markup), its id as the value."""
    label = html.Span(
        [
            html.Span(alert.severity, className=f"sev sev-{alert.severity}"),
            html.Span(alert.detector, className="detector"),
            dcc.Link(
                alert.run_name or alert.run_id,
                href=f"/runs/{quote(alert.run_id, safe='')}",
                title=alert.run_id,
                className="inbox-run",
            ),
            html.Span(alert.project, className="inbox-project"),
            html.Span(f"steps {alert.first_step}–{alert.last_step}", className="steps"),
            html.Span(
                f"open {run_state.age(alert.created_at)}"
                + (" · ack" if alert.acknowledged else ""),
                className="astatus",
            ),
            html.Span(alert.message, className="inbox-message"),
        ],
        className="inbox-row",
    )
    return {"label": label, "value": alert.id}


BULK_ACTIONS = {ids.INBOX_ACKNOWLEDGE: "acknowledge", ids.INBOX_RESOLVE: "resolve"}


def show_inbox(
    client: ApiClient, triggers: Set[str], severities: list[str], ticked: Any, shown: Any
) -> tuple:
    """(options, ticked, count, error): the open alerts, after the bulk action a button asks.

    ``triggers``: the ids of every input that fired in this call (a live tick can land in the
    same call as a click; a button acts on the ticked alerts); raises ``PreventUpdate`` when a
    tick alone found nothing new.
    """
    action = next((BULK_ACTIONS[t] for t in triggers if t in BULK_ACTIONS), None)
    try:
        for alert_id in (ticked or []) if action else []:
            client.update_alert(alert_id, ACTIONS[str(action)])
    except ApiError as exc:
        return shown or [], ticked or [], "", action_failed(exc)
    try:
        alerts = ordered(client.list_alerts(status="open").data, severities or [])
    except ApiError as exc:
        return shown or [], ticked or [], "", str(exc)
    options = [row(alert) for alert in alerts]
    kept = [] if action else [a for a in ticked or [] if a in {o["value"] for o in options}]
    same = [o["value"] for o in options] == [o["value"] for o in shown or []]
    if triggers == {ids.TICK} and same and kept == (ticked or []):
        raise PreventUpdate  # a tick that found nothing new keeps the page as it is
    return options, kept, f"{len(alerts)} open alert(s)", ""


def register(app: Dash, client: ApiClient) -> None:
    """Wire the inbox's callbacks to ``app``."""
    run_commands.register_inbox(app, client)

    @app.callback(
        Output(ids.INBOX_LIST, "options"),
        Output(ids.INBOX_LIST, "value"),
        Output(ids.INBOX_COUNT, "children"),
        Output(ids.INBOX_ERROR, "children"),
        Input(ids.TICK, "n_intervals"),
        Input(ids.INBOX_SEVERITY, "value"),
        Input(ids.INBOX_ACKNOWLEDGE, "n_clicks"),
        Input(ids.INBOX_RESOLVE, "n_clicks"),
        State(ids.INBOX_LIST, "value"),
        State(ids.INBOX_LIST, "options"),
    )
    def serve_inbox(
        _tick: Any, severities: list[str], _ack: Any, _resolve: Any, ticked: Any, shown: Any
    ) -> tuple:
        triggers = set(ctx.triggered_prop_ids.values())
        return show_inbox(client, triggers, severities, ticked, shown)
