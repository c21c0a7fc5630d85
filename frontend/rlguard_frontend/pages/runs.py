"""The runs page: every run with its status, progress and open alerts; pick runs to compare."""

from __future__ import annotations

from collections import Counter
from typing import Any

from dash import Dash, Input, Output, dcc, html
from dash.dash_table.DataTable import DataTable

from rlguard_backend.schemas import RUN_STATUSES, AlertPublic, RunPublic
from rlguard_frontend import ids, run_state
from rlguard_frontend.api_client import ApiClient, ApiError

STATUS_FILTERS = (*RUN_STATUSES, "stale")
SEVERITIES = ("critical", "warn", "info")
MARKDOWN_SPECIALS = "\\`*_{}[]()#+-.!<>|"
COLUMNS: Any = [
    {"name": "run", "id": "link", "presentation": "markdown"},
    {"name": "project", "id": "project"},
    {"name": "name", "id": "name"},
    {"name": "status", "id": "status"},
    {"name": "tags", "id": "tags"},
    {"name": "last step", "id": "last_step", "type": "numeric"},
    {"name": "updated", "id": "age"},
    *({"name": s, "id": s, "type": "numeric"} for s in SEVERITIES),
]
# Okabe–Ito, as on the panels: bluish green running, orange stale, vermillion crashed / failed
STATUS_COLOURS = {
    "running": "#009E73",
    "stale": "#E69F00",
    "crashed": "#D55E00",
    "failed": "#D55E00",
}
SEVERITY_COLOURS = {"critical": "#D55E00", "warn": "#E69F00", "info": "#56B4E9"}
STATUS_STYLES = [
    {
        "if": {"filter_query": f'{{status}} = "{status}"', "column_id": "status"},
        "color": colour,
        "fontWeight": 600,
    }
    for status, colour in STATUS_COLOURS.items()
]
SEVERITY_STYLES = [
    {"if": {"filter_query": f"{{{s}}} > 0", "column_id": s}, "color": colour, "fontWeight": 700}
    for s, colour in SEVERITY_COLOURS.items()
]


def layout() -> html.Div:
    filters = html.Div(
        [
            dcc.Dropdown(id=ids.RUNS_PROJECT, placeholder="any project", className="filter"),
            dcc.Input(id=ids.RUNS_TAG, placeholder="tag", debounce=True, className="filter-input"),
            dcc.Dropdown(
                id=ids.RUNS_STATUS,
                options=[{"label": s, "value": s} for s in STATUS_FILTERS],
                placeholder="any status",
                className="filter",
            ),
            html.Span(id=ids.RUNS_COUNT, className="runs-count"),
            html.Div(id=ids.RUNS_COMPARE, className="compare-link"),
        ],
        className="filters",
    )
    table = DataTable(
        id=ids.RUNS_TABLE,
        columns=COLUMNS,
        data=[],
        sort_action="native",
        sort_by=[{"column_id": "age", "direction": "asc"}],
        row_selectable="multi",
        selected_row_ids=[],
        page_size=50,
        markdown_options={"html": False, "link_target": "_self"},
        style_as_list_view=True,
        style_cell={"textAlign": "left", "fontFamily": "inherit", "padding": "6px 10px"},
        style_data_conditional=STATUS_STYLES + SEVERITY_STYLES,
        css=[{"selector": ".dash-spreadsheet td div", "rule": "line-height: 1.4;"}],
    )
    return html.Div(
        [html.H2("Runs"), filters, html.Div(id=ids.RUNS_ERROR, className="error"), table],
        className="runs-page",
    )


def _markdown_text(value: str) -> str:
    return "".join(f"\\{c}" if c in MARKDOWN_SPECIALS else c for c in value)


def run_row(run: RunPublic, open_alerts: Counter[tuple[str, str]]) -> dict[str, Any]:
    return {
        "id": run.id,
        "link": f"[{_markdown_text(run.id)}](/runs/{run.id})",
        "project": run.project,
        "name": run.name or "",
        "status": run_state.display_status(run),
        "tags": ", ".join(run.tags),
        "last_step": run.last_step,
        "age": run_state.age(run.last_heartbeat_at or run.updated_at),
        **{s: open_alerts[(run.id, s)] for s in SEVERITIES},
    }


def run_rows(
    runs: list[RunPublic], alerts: list[AlertPublic], status: str | None
) -> list[dict[str, Any]]:
    open_alerts: Counter[tuple[str, str]] = Counter(
        (a.run_id, a.severity) for a in alerts if a.status == "open"
    )
    rows = [run_row(run, open_alerts) for run in runs]
    return [r for r in rows if status in (None, "", r["status"])]


def register(app: Dash, client: ApiClient) -> None:
    @app.callback(
        Output(ids.RUNS_TABLE, "data"),
        Output(ids.RUNS_COUNT, "children"),
        Output(ids.RUNS_ERROR, "children"),
        Output(ids.RUNS_PROJECT, "options"),
        Input(ids.TICK, "n_intervals"),
        Input(ids.RUNS_PROJECT, "value"),
        Input(ids.RUNS_TAG, "value"),
        Input(ids.RUNS_STATUS, "value"),
    )
    def refresh_runs(
        _tick: int | None, project: str | None, tag: str | None, status: str | None
    ) -> tuple:
        api_status = status if status in RUN_STATUSES else "running" if status == "stale" else None
        try:
            runs = client.list_runs(
                project=project or None, status=api_status, tag=tag or None
            ).data
            alerts = client.list_alerts(status="open").data
            projects = sorted({r.project for r in client.list_runs().data})
        except ApiError as exc:
            return [], "", str(exc), []
        rows = run_rows(runs, alerts, status)
        options = [{"label": p, "value": p} for p in projects]
        return rows, f"{len(rows)} run(s)", "", options

    @app.callback(Output(ids.RUNS_COMPARE, "children"), Input(ids.RUNS_TABLE, "selected_row_ids"))
    def link_compare(selected: list[str] | None) -> Any:
        if not selected:
            return html.Span("select runs to compare", className="hint")
        return dcc.Link(
            f"compare {len(selected)} run(s) →",
            href=f"/compare?runs={','.join(selected)}",
            className="button",
        )
