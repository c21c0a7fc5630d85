"""``/policies``: a project's command policies (stop or checkpoint its runs on a persisting
alert), listed, added and removed; ``?project=P`` opens one project."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from dash import ALL, Dash, Input, Output, State, ctx, dcc, html

from rlguard_backend.schemas import PolicyPublic
from rlguard_frontend import ids
from rlguard_frontend.api_client import ApiClient, ApiError
from rlguard_frontend.components.run_commands import refusal

SEVERITIES = ("critical", "warn", "info")
READ_ONLY = (
    "Your token can only read: adding and removing policies needs one with the write scope "
    "(an admin makes it with `rlguard token create --name NAME --scope write`)."
)


def layout(query: str = "", writable: bool = True) -> html.Div:
    """The project field, the rule form and the project's policies (filled by a callback); for
    a read-only token, a sentence instead of the form."""
    project = parse_qs(query).get("project", [""])[0]
    hidden = {} if writable else {"display": "none"}
    return html.Div(
        [
            html.H2("Command policies"),
            html.P(
                "Stop (or checkpoint) a project's runs when an alert reaches a severity and stays "
                "open for some steps. The service applies a policy on ingest, once a run; a dry "
                "run only records what it would have done. Backtest one first: "
                "rlguard detect --policy ALERT@SEVERITY:STEPS --project P.",
                className="hint",
            ),
            dcc.Input(id=ids.POLICIES_PROJECT, value=project, placeholder="project", debounce=True),
            *([] if writable else [html.P(READ_ONLY, id=ids.POLICIES_READ_ONLY, className="hint")]),
            html.Div(
                [
                    dcc.Input(id=ids.POLICIES_ALERT, placeholder="alert, e.g. entropy_collapse"),
                    dcc.Dropdown(
                        list(SEVERITIES),
                        "critical",
                        id=ids.POLICIES_SEVERITY,
                        clearable=False,
                        className="policy-severity",
                    ),
                    dcc.Input(
                        id=ids.POLICIES_STEPS,
                        type="number",
                        min=0,
                        value=0,
                        className="policy-steps",
                    ),
                    dcc.RadioItems(
                        ["stop", "checkpoint"], "stop", id=ids.POLICIES_ACTION, inline=True
                    ),
                    dcc.Checklist(["dry run"], [], id=ids.POLICIES_DRY_RUN, inline=True),
                    html.Button("add policy", id=ids.POLICIES_ADD, className="button-small"),
                ],
                className="filters",
                style=hidden,
            ),
            html.Div(id=ids.POLICIES_RESULT, className="command-result"),
            html.Div(id=ids.POLICIES_LIST, className="policy-list"),
        ]
    )


def rows(found: list[PolicyPublic], writable: bool = True) -> list[Any]:
    """One line a policy, with its remove button (none for a read-only viewer)."""
    if not found:
        return [html.P("No policy: this project's runs stop only when someone asks.")]
    return [
        html.Div(
            [
                html.Span(describe(policy)),
                *(
                    [
                        html.Button(
                            "remove",
                            id={"type": ids.POLICY_REMOVE, "policy": policy.id},
                            className="button-small",
                        )
                    ]
                    if writable
                    else []
                ),
            ],
            className="policy-row",
        )
        for policy in found
    ]


def describe(policy: PolicyPublic) -> str:
    """A policy in one sentence."""
    dry = " (dry run: recorded, not sent)" if policy.dry_run else ""
    return (
        f"#{policy.id}: {policy.action} when {policy.alert} is {policy.severity} or worse for "
        f"{policy.persist_steps} step(s){dry}, by {policy.created_by}"
    )


def change_policies(client: ApiClient, project: str, trigger: Any, form: dict[str, Any]) -> tuple:
    """(rows, sentence): the project's policies after the add or remove a click asked for."""
    if not project:
        return [], "Name a project to see and set its policies."
    said = ""
    try:
        if trigger == ids.POLICIES_ADD:
            made = client.create_policy(project, form)
            said = f"Added {describe(made)}."
        elif isinstance(trigger, dict):
            gone = client.delete_policy(project, int(trigger["policy"]))
            said = f"Removed policy #{gone.id}."
        found = _listed(client, project)
    except ApiError as exc:
        return [], refusal("set policies for", exc) if exc.status_code == 403 else (
            f"Not done: {exc.detail}"
        )
    return rows(found, client.can_write()), said


def _listed(client: ApiClient, project: str) -> list[PolicyPublic]:
    """The project's policies; none for a project the service knows nothing of yet."""
    try:
        return client.list_policies(project).data
    except ApiError as exc:
        if exc.status_code == 404:
            return []
        raise


def register(app: Dash, client: ApiClient) -> None:
    """Wire the page's one callback to ``app``."""

    @app.callback(
        Output(ids.POLICIES_LIST, "children"),
        Output(ids.POLICIES_RESULT, "children"),
        Input(ids.POLICIES_PROJECT, "value"),
        Input(ids.POLICIES_ADD, "n_clicks"),
        Input({"type": ids.POLICY_REMOVE, "policy": ALL}, "n_clicks"),
        State(ids.POLICIES_ALERT, "value"),
        State(ids.POLICIES_SEVERITY, "value"),
        State(ids.POLICIES_STEPS, "value"),
        State(ids.POLICIES_ACTION, "value"),
        State(ids.POLICIES_DRY_RUN, "value"),
    )
    def show_policies(
        project: str | None,
        _add: Any,
        removes: list[Any],
        alert: str | None,
        severity: str,
        steps: int | None,
        action: str,
        dry: list[str],
    ) -> tuple:
        trigger = ctx.triggered_id
        if isinstance(trigger, dict) and not any(removes):
            trigger = None  # the rows were redrawn, nobody clicked
        form = {
            "alert": (alert or "").strip(),
            "severity": severity,
            "persist_steps": steps or 0,
            "action": action,
            "dry_run": bool(dry),
        }
        return change_policies(client, (project or "").strip(), trigger, form)
