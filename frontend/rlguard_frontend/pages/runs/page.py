"""The runs page: a grid of every run, paged, sorted and filtered by the API; pick runs to compare.

The grid (AG Grid's infinite row model) asks for the rows it shows; ``runs_grid.grid_rows``
turns that request into one ``GET /api/v1/runs``, so thousands of runs cost a page of rows
each. Columns come from the runs' configs and summaries
(``GET /api/v1/run-fields``), chosen and pinned by the viewer.
"""

from __future__ import annotations

import contextlib
from typing import Any

import dash_ag_grid as dag
from dash import Dash, Input, Output, State, ctx, dcc, html
from dash.exceptions import PreventUpdate

from rlguard_backend.schemas import RUN_STATUSES
from rlguard_frontend import ids, url_state
from rlguard_frontend.api_client import ApiClient, ApiError
from rlguard_frontend.pages.runs.columns import (
    DEFAULT_COLUMNS,
    HEADERS,
    column_defs,
    column_options,
    pin_options,
)
from rlguard_frontend.pages.runs.grid import PAGE_ROWS, grid_rows
from rlguard_frontend.url_state import RunsState

STATUS_FILTERS = (*RUN_STATUSES, "stale")
REFRESH_EVERY_TICKS = 10  # rows refetched this often even when no run was added
GRID_OPTIONS: dict[str, Any] = {
    "rowModelType": "infinite",
    "pagination": True,
    "paginationPageSize": PAGE_ROWS,
    "paginationPageSizeSelector": False,
    "cacheBlockSize": PAGE_ROWS,
    "maxBlocksInCache": 20,
    "suppressFieldDotNotation": True,  # "config.lr" is one field, not a path into the row
    "rowSelection": {"mode": "multiRow", "checkboxes": True, "headerCheckbox": False},
    "domLayout": "autoHeight",
    "suppressColumnVirtualisation": True,  # a few dozen columns: all rendered, all findable
    "suppressCellFocus": True,
}


def layout(query: str | None = None, client: ApiClient | None = None) -> html.Div:
    """The runs page as its URL's ``query`` says: filters, columns and the server-side grid;
    with a ``client``, the pickers' choices come with it (no round trip after the start)."""
    state = RunsState.from_query(query, STATUS_FILTERS)
    columns = list(DEFAULT_COLUMNS if state.columns is None else state.columns)
    projects = [{"label": state.project, "value": state.project}] if state.project else []
    column_choices = [{"label": HEADERS.get(c, c), "value": c} for c in columns]
    kinds: dict[str, str] = {}
    total = None  # known, the first tick refetches no rows: the grid asks for its first itself
    if client is not None:
        with contextlib.suppress(ApiError):  # the grid's first request shows the error
            projects, column_choices, kinds = choices(client, state.project, columns)
            total = {"total": client.list_runs(limit=1).count, "refresh": 0}
    filters = html.Div(
        [
            dcc.Dropdown(
                id=ids.RUNS_PROJECT,
                options=projects,
                value=state.project,
                placeholder="any project",
                className="filter",
            ),
            dcc.Input(
                id=ids.RUNS_TAG,
                value=state.tag or "",
                placeholder="tag",
                debounce=True,
                className="filter-input",
            ),
            dcc.Dropdown(
                id=ids.RUNS_STATUS,
                options=[{"label": s, "value": s} for s in STATUS_FILTERS],
                value=state.status,
                placeholder="any status",
                className="filter",
            ),
            html.Span(id=ids.RUNS_COUNT, className="runs-count"),
            html.Div(compare_link(None), id=ids.RUNS_COMPARE, className="compare-link"),
        ],
        className="filters",
    )
    choosers = html.Div(
        [
            dcc.Dropdown(
                id=ids.RUNS_COLUMNS,
                options=column_choices,
                value=columns,
                multi=True,
                placeholder="columns: config and summary keys, last values, alerts",
                className="filter filter-wide",
            ),
            dcc.Dropdown(
                id=ids.RUNS_PINNED,
                options=pin_options(columns),
                value=list(state.pinned),
                multi=True,
                placeholder="pin columns",
                className="filter",
            ),
        ],
        className="filters",
    )
    grid = dag.AgGrid(
        id=ids.RUNS_TABLE,
        columnDefs=column_defs(columns, list(state.pinned), kinds, state),
        filterModel=state.filter_model,
        defaultColDef={
            "sortable": True,
            "resizable": True,
            "floatingFilter": True,
            "minWidth": 110,
        },
        rowModelType="infinite",
        dashGridOptions=GRID_OPTIONS,
        getRowId="params.data.id",
        columnSize="autoSize",
        className="ag-theme-quartz runs-grid",
    )
    return html.Div(
        [
            html.H2("Runs"),
            dcc.Store(id=ids.RUNS_TOTAL, data=total),
            dcc.Store(id=ids.RUNS_KINDS, data=kinds),
            dcc.Store(id=ids.RUNS_REFRESHED),
            dcc.Store(id=ids.RUNS_QUERY),
            dcc.Store(id=ids.RUNS_VIEW),
            filters,
            choosers,
            html.Div(id=ids.RUNS_ERROR, className="error"),
            grid,
        ],
        className="runs-page",
    )


def choices(
    client: ApiClient, project: str | None, chosen: list[str] | None
) -> tuple[list[dict[str, str]], list[dict[str, str]], dict[str, str]]:
    """(project choices, column choices, each field's kind); raises ``ApiError``."""
    projects = client.list_projects().data
    fields = client.list_run_fields(project or None).data
    options, kinds = column_options(fields, chosen)
    return [{"label": p.name, "value": p.name} for p in projects], options, kinds


def runs_total(client: ApiClient, tick: int | None, known: dict[str, int] | None) -> dict[str, int]:
    """How many runs exist, and a refresh counter the grid refetches its rows on."""
    try:
        total = client.list_runs(limit=1).count
    except ApiError:
        raise PreventUpdate from None
    known = known or {"total": -1, "refresh": 0}
    due = tick is not None and tick > 0 and tick % REFRESH_EVERY_TICKS == 0  # not at the start
    if total == known["total"] and not due:
        raise PreventUpdate
    return {"total": total, "refresh": known["refresh"] + 1}


def compare_link(selected: list[dict[str, Any]] | None) -> Any:
    """A link comparing the ticked runs, or a hint to tick some."""
    run_ids = [row["id"] for row in selected or [] if row and row.get("id")]
    if not run_ids:
        return html.Span("tick runs to compare", className="hint")
    return dcc.Link(
        f"compare {len(run_ids)} run(s) →",
        href=f"/compare?runs={','.join(run_ids)}",
        className="button",
    )


def register(app: Dash, client: ApiClient) -> None:
    """Wire the runs page's callbacks to ``app``."""

    @app.callback(
        Output(ids.RUNS_TABLE, "getRowsResponse"),
        Output(ids.RUNS_COUNT, "children"),
        Output(ids.RUNS_ERROR, "children"),
        Input(ids.RUNS_TABLE, "getRowsRequest"),
        State(ids.RUNS_PROJECT, "value"),
        State(ids.RUNS_TAG, "value"),
        State(ids.RUNS_STATUS, "value"),
        State(ids.RUNS_COLUMNS, "value"),
    )
    def serve_rows(request, project, tag, status, columns) -> tuple:
        return grid_rows(client, request, project, tag, status, columns)

    @app.callback(
        Output(ids.RUNS_TOTAL, "data"),
        Input(ids.TICK, "n_intervals"),
        State(ids.RUNS_TOTAL, "data"),
    )
    def watch_total(tick: int | None, known: dict[str, int] | None) -> dict[str, int]:
        return runs_total(client, tick, known)

    @app.callback(
        Output(ids.RUNS_PROJECT, "options"),
        Output(ids.RUNS_COLUMNS, "options"),
        Output(ids.RUNS_KINDS, "data"),
        Input(ids.RUNS_PROJECT, "value"),
        State(ids.RUNS_COLUMNS, "value"),
        prevent_initial_call=True,  # the first layout came with them
    )
    def list_choices(project: str | None, chosen: list[str] | None) -> tuple:
        try:
            return choices(client, project, chosen)
        except ApiError:
            raise PreventUpdate from None

    @app.callback(
        Output(ids.RUNS_TABLE, "columnDefs"),
        Output(ids.RUNS_PINNED, "options"),
        Input(ids.RUNS_COLUMNS, "value"),
        Input(ids.RUNS_PINNED, "value"),
        Input(ids.RUNS_KINDS, "data"),
        State(ids.RUNS_TABLE, "columnDefs"),
        State(ids.URL, "search"),  # the grid's sort, kept there
        prevent_initial_call=True,
    )
    def choose_columns(columns, pinned, kinds, shown, search) -> tuple:
        sorted_by = RunsState.from_query(search, STATUS_FILTERS)
        defs = column_defs(columns or [], pinned or [], kinds or {}, sorted_by)
        if defs == shown:
            raise PreventUpdate  # new column definitions would reset the viewer's sort
        return defs, pin_options(columns)

    # Any change of what the rows are made from refetches them (the grid keeps its page).
    app.clientside_callback(
        """function() {
            const id = arguments[arguments.length - 1];
            try {
                dash_ag_grid.getApi(id).refreshInfiniteCache();
            } catch (e) {  // not started yet: it asks for its first rows when it starts
                return window.dash_clientside.no_update;
            }
            return Date.now();
        }""",
        Output(ids.RUNS_REFRESHED, "data"),
        Input(ids.RUNS_TOTAL, "data"),
        Input(ids.RUNS_PROJECT, "value"),
        Input(ids.RUNS_TAG, "value"),
        Input(ids.RUNS_STATUS, "value"),
        Input(ids.RUNS_COLUMNS, "value"),
        State(ids.RUNS_TABLE, "id"),
        prevent_initial_call=True,
    )

    @app.callback(
        Output(ids.RUNS_QUERY, "data"),
        Output(ids.RUNS_VIEW, "data"),
        Input(ids.RUNS_PROJECT, "value"),
        Input(ids.RUNS_TAG, "value"),
        Input(ids.RUNS_STATUS, "value"),
        Input(ids.RUNS_COLUMNS, "value"),
        Input(ids.RUNS_PINNED, "value"),
        Input(ids.RUNS_TABLE, "getRowsRequest"),
        State(ids.THEME, "data"),  # carried into the link with the next change of view
        State(ids.RUNS_VIEW, "data"),
        prevent_initial_call=True,
    )
    def keep_in_url(*values: Any) -> tuple:
        """Each change of view becomes a history entry: back/forward and copied links work."""
        if len(ctx.triggered) != 1:
            raise PreventUpdate  # the page was just built (from this URL): nothing changed
        return url_state.next_view(state_from(*values[:-1]), values[-1], "/")

    url_state.push_to_url(app, ids.RUNS_QUERY)

    @app.callback(
        Output(ids.RUNS_COMPARE, "children"),
        Input(ids.RUNS_TABLE, "selectedRows"),
        prevent_initial_call=True,  # none ticked yet: the layout came with the hint
    )
    def link_compare(selected: list[dict[str, Any]] | None) -> Any:
        return compare_link(selected)


def state_from(
    project: str | None,
    tag: str | None,
    status: str | None,
    columns: list[str] | None,
    pinned: list[str] | None,
    request: dict[str, Any] | None,
    theme: str | None,
) -> RunsState:
    """The pickers' values and the grid's latest request as one state (what the URL holds)."""
    request = request or {}
    chosen = tuple(columns or ())
    return RunsState(
        project=project or None,
        tag=(tag or "").strip() or None,
        status=status or None,
        columns=None if chosen == DEFAULT_COLUMNS else chosen,
        pinned=tuple(pinned or ()),
        sort=url_state.sort_from(request.get("sortModel")),
        filters=url_state.grid_filters(request.get("filterModel")),
        theme=theme,
    )
