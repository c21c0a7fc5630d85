"""Stop or checkpoint a run from its page, or stop the runs of alerts ticked in the inbox: a
button, a confirmation naming the runs, the answer; and the run's commands listed on its page.

The run page's buttons sit outside the live header (which each refresh redraws), so a click is
never lost.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from dash import Dash, Input, Output, State, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from rlguard_backend.schemas import CommandPublic
from rlguard_frontend import ids
from rlguard_frontend.api_client import ApiClient, ApiError

BUTTONS = {ids.RUN_STOP: "stop", ids.RUN_CHECKPOINT: "checkpoint"}
HISTORY_EVERY_TICKS = 5  # the list re-reads the run's commands every 5th tick (~5 s)
HISTORY_COLUMNS = ("command", "state", "asked by", "why", "asked", "delivered", "acted")
WHAT_HAPPENS = {
    "stop": "Its trainer ends training at its next check of run.should_stop.",
    "checkpoint": "Its trainer saves a checkpoint at its next check and goes on.",
}


def controls(writable: bool = True) -> html.Div:
    """The run page's command buttons (hidden from a read-only viewer, as the inbox's are),
    their confirmation and the line that answers."""
    hidden = {} if writable else {"display": "none"}
    return html.Div(
        [
            html.Button(
                "stop run…", id=ids.RUN_STOP, className="button-small button-danger", style=hidden
            ),
            html.Button(
                "checkpoint…", id=ids.RUN_CHECKPOINT, className="button-small", style=hidden
            ),
            dcc.ConfirmDialog(id=ids.RUN_COMMAND_CONFIRM),
            dcc.Store(id=ids.RUN_COMMAND_KIND),
            html.Span(id=ids.RUN_COMMAND_RESULT, className="command-result"),
        ],
        className="run-actions",
    )


def history() -> html.Section:
    """The run's commands (filled by ``register``'s callback; empty until there is one)."""
    return html.Section(id=ids.RUN_COMMANDS, className="run-commands")


def history_table(commands: list[CommandPublic]) -> list[Any]:
    """The run's commands, oldest first: kind, state, who, why and when asked, delivered and
    acted on; nothing when there is none."""
    if not commands:
        return []
    rows = [
        html.Tr(
            [
                html.Td(("would " if c.dry_run else "") + c.kind),
                html.Td(c.state),
                html.Td(c.requested_by),
                html.Td(c.reason or ""),
                html.Td(_when(c.requested_at, c.requested_step)),
                html.Td(_when(c.delivered_at)),
                html.Td(_when(c.acted_at, c.acted_step)),
            ]
        )
        for c in commands
    ]
    head = html.Thead(html.Tr([html.Th(column) for column in HISTORY_COLUMNS]))
    return [html.H3("Commands"), html.Table([head, html.Tbody(rows)], className="command-table")]


def _when(at: datetime | None, step: int | None = None) -> str:
    """``2026-12-04 16:20:01 UTC (step 19)``; a dash for what has not happened yet."""
    if at is None:
        return "—"
    return f"{at:%Y-%m-%d %H:%M:%S} UTC" + (f" (step {step})" if step is not None else "")


def confirmation(kind: str, run_id: str, name: str | None, project: str) -> str:
    """The question the dialog asks, naming the run so nobody stops the wrong one."""
    return f"{kind.capitalize()} run {named(run_id, name, project)}? {WHAT_HAPPENS[kind]}"


def named(run_id: str, name: str | None, project: str) -> str:
    """A run as a person knows it: its name with its id, and its project.

    >>> named("r1", "grpo-seed3", "math")
    "'grpo-seed3' (r1) in project 'math'"
    """
    shown = f"{name!r} ({run_id})" if name and name != run_id else repr(run_id)
    return f"{shown} in project {project!r}"


def ask(client: ApiClient, run_id: str, kind: str, reason: str | None = None) -> str:
    """Send the command; the sentence the page shows, for success and for failure."""
    try:
        command = client.ask_command(run_id, kind, reason)
    except ApiError as exc:
        return refusal(kind, exc)
    return (
        f"{kind} asked (command {command.id}): it reaches the trainer with its next batch, "
        "or within ~5 s when it logs less often."
    )


def refusal(kind: str, exc: ApiError) -> str:
    """Why a command was not sent, in words a viewer can act on."""
    if exc.status_code == 403:
        return (
            f"You cannot {kind} runs: this dashboard's token can only read. Sign in with a "
            "token of write scope (rlguard token create --scope write)."
        )
    return f"Not sent: {exc.detail}"


def register(app: Dash, client: ApiClient) -> None:
    """Wire the buttons, the dialog and the command to ``app``."""

    @app.callback(
        Output(ids.RUN_COMMAND_CONFIRM, "displayed"),
        Output(ids.RUN_COMMAND_CONFIRM, "message"),
        Output(ids.RUN_COMMAND_KIND, "data"),
        Output(ids.RUN_COMMAND_RESULT, "children", allow_duplicate=True),
        Input(ids.RUN_STOP, "n_clicks"),
        Input(ids.RUN_CHECKPOINT, "n_clicks"),
        State(ids.RUN_ID, "data"),
        prevent_initial_call=True,
    )
    def confirm_command(_stop: Any, _checkpoint: Any, run_id: str) -> tuple:
        kind = BUTTONS[str(ctx.triggered_id)]
        try:
            run = client.get_run(run_id)
        except ApiError as exc:
            return False, "", None, refusal(kind, exc)
        return True, confirmation(kind, run.id, run.name, run.project), kind, ""

    @app.callback(
        Output(ids.RUN_COMMAND_RESULT, "children"),
        Input(ids.RUN_COMMAND_CONFIRM, "submit_n_clicks"),
        State(ids.RUN_COMMAND_KIND, "data"),
        State(ids.RUN_ID, "data"),
        prevent_initial_call=True,
    )
    def send_command(_submitted: Any, kind: str | None, run_id: str) -> Any:
        if kind is None:
            return no_update
        return ask(client, run_id, kind)

    @app.callback(
        Output(ids.RUN_COMMANDS, "children"),
        Input(ids.RUN_ID, "data"),
        Input(ids.RUN_COMMAND_RESULT, "children"),
        Input(ids.TICK, "n_intervals"),
    )
    def show_history(run_id: str, _answer: Any, ticks: int | None) -> list[Any]:
        if ctx.triggered_id == ids.TICK and (ticks or 0) % HISTORY_EVERY_TICKS:
            raise PreventUpdate
        try:
            return history_table(client.list_commands(run_id).data)
        except ApiError:
            raise PreventUpdate from None  # not there yet, or the API is away: the tick retries


def inbox_controls(style: dict[str, str] | None = None) -> html.Span:
    """The inbox's "stop their runs" button (``style`` hides it from a read-only viewer), its
    confirmation and its answer."""
    return html.Span(
        [
            html.Button(
                "stop their runs…",
                id=ids.INBOX_STOP,
                className="button-small button-danger",
                style=style,
            ),
            dcc.ConfirmDialog(id=ids.INBOX_STOP_CONFIRM),
            dcc.Store(id=ids.INBOX_STOP_TARGETS),
            html.Span(id=ids.INBOX_STOP_RESULT, className="command-result"),
        ]
    )


def stop_targets(client: ApiClient, alert_ids: list[int]) -> list[dict[str, Any]]:
    """One entry per run among the ticked alerts: the run and the alert that prompts its stop."""
    ticked = set(alert_ids)
    targets: dict[str, dict[str, Any]] = {}
    for alert in client.list_alerts(status="open").data:
        if alert.id in ticked and alert.run_id not in targets:
            why = f"from the inbox: {alert.severity} {alert.detector}/{alert.key}"
            targets[alert.run_id] = {
                "run_id": alert.run_id,
                "alert_id": alert.id,
                "reason": why,
                "named": named(alert.run_id, alert.run_name, alert.project),
            }
    return list(targets.values())


def stop_all(client: ApiClient, targets: list[dict[str, Any]]) -> str:
    """Ask each run to stop; one sentence per run."""
    said = []
    for target in targets:
        try:
            command = client.ask_command(
                target["run_id"], "stop", target["reason"], target["alert_id"]
            )
            said.append(f"{target['named']}: stop asked (command {command.id})")
        except ApiError as exc:
            said.append(f"{target['named']}: {refusal('stop', exc)}")
    return "; ".join(said) + "."


def register_inbox(app: Dash, client: ApiClient) -> None:
    """Wire the inbox's stop button, its dialog and the commands to ``app``."""

    @app.callback(
        Output(ids.INBOX_STOP_CONFIRM, "displayed"),
        Output(ids.INBOX_STOP_CONFIRM, "message"),
        Output(ids.INBOX_STOP_TARGETS, "data"),
        Output(ids.INBOX_STOP_RESULT, "children", allow_duplicate=True),
        Input(ids.INBOX_STOP, "n_clicks"),
        State(ids.INBOX_LIST, "value"),
        prevent_initial_call=True,
    )
    def confirm_stops(_clicks: Any, ticked: list[int] | None) -> tuple:
        if not ticked:
            return False, "", None, "Tick the alerts whose runs should stop."
        try:
            targets = stop_targets(client, ticked)
        except ApiError as exc:
            return False, "", None, refusal("stop", exc)
        names = ", ".join(t["named"] for t in targets)
        question = f"Stop {len(targets)} run(s): {names}? {WHAT_HAPPENS['stop']}"
        return True, question, targets, ""

    @app.callback(
        Output(ids.INBOX_STOP_RESULT, "children"),
        Input(ids.INBOX_STOP_CONFIRM, "submit_n_clicks"),
        State(ids.INBOX_STOP_TARGETS, "data"),
        prevent_initial_call=True,
    )
    def send_stops(_submitted: Any, targets: list[dict[str, Any]] | None) -> Any:
        return stop_all(client, targets) if targets else no_update
