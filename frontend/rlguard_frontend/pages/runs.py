"""The runs page: every run with its project, status and progress, refreshed live."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from dash import Dash, Input, Output, dash_table, dcc, html

from rlguard_frontend import ids
from rlguard_frontend.api_client import ApiClient, ApiError

STATUSES = ("running", "finished", "crashed", "failed")
COLUMNS = [
    {"name": "run", "id": "id"},
    {"name": "project", "id": "project"},
    {"name": "name", "id": "name"},
    {"name": "status", "id": "status"},
    {"name": "last step", "id": "last_step", "type": "numeric"},
    {"name": "updated", "id": "age"},
]


def layout() -> html.Div:
    return html.Div(
        [
            html.H2("Runs"),
            html.Div(
                [
                    dcc.Input(id=ids.RUNS_PROJECT, placeholder="project", debounce=True),
                    dcc.Dropdown(
                        id=ids.RUNS_STATUS,
                        options=[{"label": s, "value": s} for s in STATUSES],
                        placeholder="any status",
                        style={"width": "12em"},
                    ),
                    html.Span(id=ids.RUNS_COUNT, className="runs-count"),
                ],
                className="filters",
            ),
            html.Div(id=ids.RUNS_ERROR, className="error"),
            dash_table.DataTable(
                id=ids.RUNS_TABLE,
                columns=COLUMNS,
                data=[],
                sort_action="native",
                page_size=50,
                style_cell={"textAlign": "left", "fontFamily": "inherit"},
            ),
        ]
    )


def _age(moment: datetime) -> str:
    seconds = max(0, int((datetime.now(timezone.utc) - moment).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


def run_rows(client: ApiClient, project: str | None, status: str | None) -> list[dict[str, Any]]:
    runs = client.list_runs(project=project or None, status=status or None)
    return [
        {
            "id": run.id,
            "project": run.project,
            "name": run.name or "",
            "status": run.status,
            "last_step": run.last_step,
            "age": _age(run.updated_at),
        }
        for run in runs.data
    ]


def register(app: Dash, client: ApiClient) -> None:
    @app.callback(
        Output(ids.RUNS_TABLE, "data"),
        Output(ids.RUNS_COUNT, "children"),
        Output(ids.RUNS_ERROR, "children"),
        Input(ids.TICK, "n_intervals"),
        Input(ids.RUNS_PROJECT, "value"),
        Input(ids.RUNS_STATUS, "value"),
    )
    def refresh_runs(_tick: int | None, project: str | None, status: str | None) -> tuple:
        try:
            rows = run_rows(client, project, status)
        except ApiError as exc:
            return [], "", str(exc)
        return rows, f"{len(rows)} run(s)", ""
