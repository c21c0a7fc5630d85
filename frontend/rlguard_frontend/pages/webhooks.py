"""``/settings/webhooks``: the service's stored webhooks, added, enabled, disabled, deleted and
tested here (admin token); a viewer without one is told which scope is needed."""

from __future__ import annotations

from typing import Any

from dash import ALL, Dash, Input, Output, State, ctx, dcc, html
from dash.exceptions import PreventUpdate

from rlguard_backend.schemas.webhooks import WebhookPublic, WebhookTestResult
from rlguard_frontend import ids
from rlguard_frontend.api_client import ApiClient, ApiError

PATH = "/settings/webhooks"
FORMATS = ("json", "slack", "discord")
SEVERITIES = ("info", "warn", "critical")
NEEDS_ADMIN = (
    "Managing webhooks needs an admin token for every project; the token you are signed in "
    "with has a smaller scope or is limited to one project. Sign out and sign in with one "
    "(`rlguard token create --scope admin` makes it)."
)


def layout(client: ApiClient) -> html.Div:
    """The form to add a hook, and the hooks as they are now."""
    rows, status = hook_rows(client)
    form = html.Div(
        [
            dcc.Input(
                id=ids.WEBHOOKS_URL,
                placeholder="https://hooks.slack.com/…",
                type="url",
                style={"width": "32em"},
            ),
            dcc.Dropdown(
                id=ids.WEBHOOKS_FORMAT,
                options=list(FORMATS),
                value="json",
                clearable=False,
                className="filter",
            ),
            dcc.Input(
                id=ids.WEBHOOKS_PROJECT,
                placeholder="project (empty: every project)",
                style={"width": "16em"},
            ),
            dcc.Dropdown(
                id=ids.WEBHOOKS_SEVERITY,
                options=[{"label": f"{s} and worse", "value": s} for s in SEVERITIES],
                value="warn",
                clearable=False,
                className="filter",
            ),
            html.Button("add", id=ids.WEBHOOKS_ADD, className="button-small"),
        ],
        className="filters",
    )
    return html.Div(
        [
            html.H2("Webhooks"),
            html.P(
                "Alert changes are posted to these hooks, signed with each hook's secret. "
                "The payload, the Slack and Discord shapes and how to verify a signature: "
                "docs/reference/webhooks.md."
            ),
            form,
            html.Div(id=ids.WEBHOOKS_SECRET, className="webhooks-secret"),
            html.Div(status, id=ids.WEBHOOKS_STATUS, className="error" if status else ""),
            html.Div(rows, id=ids.WEBHOOKS_LIST, className="webhooks-list"),
        ],
        className="webhooks-page",
    )


def hook_rows(client: ApiClient) -> tuple[Any, str]:
    """(the hooks as a table, or a sentence why they cannot be shown)."""
    try:
        hooks = client.list_webhooks().data
    except ApiError as exc:
        return [], explain(exc)
    if not hooks:
        return html.P("No webhooks yet: add one above."), ""
    header = html.Tr(
        [html.Th(h) for h in ("url", "format", "project", "least severity", "secret", "state", "")]
    )
    return html.Table([header, *(hook_row(hook) for hook in hooks)], className="webhooks"), ""


def _action(action: str, hook: WebhookPublic, label: str) -> html.Button:
    return html.Button(
        label,
        id={"type": ids.WEBHOOKS_ACTION, "action": action, "hook": hook.id},
        className="button-small",
    )


def hook_row(hook: WebhookPublic) -> html.Tr:
    """One hook: what it sends where, and its buttons."""
    toggle = (
        _action("disable", hook, "disable") if hook.enabled else _action("enable", hook, "enable")
    )
    return html.Tr(
        [
            html.Td(hook.url, className="webhook-url"),
            html.Td(hook.format),
            html.Td(hook.project or "every project"),
            html.Td(hook.min_severity),
            html.Td(f"{hook.secret_prefix}…"),
            html.Td("enabled" if hook.enabled else "disabled", className="webhook-state"),
            html.Td([toggle, _action("test", hook, "test"), _action("delete", hook, "delete")]),
        ],
        className="webhook-row",
        id=f"webhook-{hook.id}",
    )


def explain(exc: ApiError) -> str:
    """What a viewer reads when the API refuses or cannot be reached: a sentence, no JSON."""
    if exc.status_code in (401, 403):
        return NEEDS_ADMIN
    if exc.status_code == 422:
        return "The webhook was not added: " + _invalid_fields(str(exc))
    return str(exc).split(": {", 1)[0] + " (see the service's log)"


def _invalid_fields(message: str) -> str:
    if "url" in message:
        return "the url must start with http:// or https:// and hold no spaces."
    if "project" in message:
        return "a project name is 1 to 128 characters."
    return "a field is not valid."


def tested(result: WebhookTestResult) -> str:
    """A test's outcome as a sentence."""
    if result.delivered:
        took = f"{result.elapsed_ms:.0f} ms"
        return f"Test delivered: the receiver answered {result.status_code} in {took}."
    said = f"answered {result.status_code}" if result.status_code else "could not be reached"
    return f"Test not delivered: the receiver {said} ({result.response[:200]})."


def act(client: ApiClient, trigger: Any, hook: dict[str, Any]) -> tuple[str, str]:
    """Do what was clicked; (the created hook's secret note, the status sentence)."""
    if trigger == ids.WEBHOOKS_ADD:
        created = client.create_webhook(hook)
        secret = (
            f"Added. Its signing secret, shown this once: {created.secret} — keep it where "
            "the receiver verifies X-Rlguard-Signature."
        )
        return secret, ""
    hook_id, action = trigger["hook"], trigger["action"]
    if action == "test":
        return "", tested(client.test_webhook(hook_id))
    if action == "delete":
        client.delete_webhook(hook_id)
        return "", f"Webhook {hook_id} deleted."
    client.update_webhook(hook_id, {"enabled": action == "enable"})
    return "", f"Webhook {hook_id} {action}d."


def register(app: Dash, client: ApiClient) -> None:
    """Wire the page's one callback to ``app``."""

    @app.callback(
        Output(ids.WEBHOOKS_LIST, "children"),
        Output(ids.WEBHOOKS_SECRET, "children"),
        Output(ids.WEBHOOKS_STATUS, "children"),
        Input(ids.WEBHOOKS_ADD, "n_clicks"),
        Input({"type": ids.WEBHOOKS_ACTION, "action": ALL, "hook": ALL}, "n_clicks"),
        State(ids.WEBHOOKS_URL, "value"),
        State(ids.WEBHOOKS_FORMAT, "value"),
        State(ids.WEBHOOKS_PROJECT, "value"),
        State(ids.WEBHOOKS_SEVERITY, "value"),
        prevent_initial_call=True,
    )
    def change_webhooks(
        _add: Any, _actions: Any, url: str | None, fmt: str, project: str | None, severity: str
    ) -> tuple:
        if not ctx.triggered or not ctx.triggered[0]["value"]:
            raise PreventUpdate  # buttons drawn anew, none clicked
        hook: dict[str, Any] = {
            "url": (url or "").strip(),
            "format": fmt,
            "min_severity": severity,
            "project": (project or "").strip() or None,
        }
        try:
            secret, status = act(client, ctx.triggered_id, hook)
        except ApiError as exc:
            secret, status = "", explain(exc)
        rows, problem = hook_rows(client)
        return rows, secret, problem or status
