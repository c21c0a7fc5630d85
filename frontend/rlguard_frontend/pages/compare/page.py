"""The compare page: runs overlaid (or grouped into bands) per signal, against a baseline run.

Everything it shows lives in the URL (``compare_state``): a copied link opens the same view,
and back/forward step through the views. Up to ``MAX_RUNS`` runs; the fewer points each the
more runs there are, so 50 overlaid runs draw about as fast as two.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from dash import Dash, Input, Output, State, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from rlguard_backend.schemas import RunPublic
from rlguard_frontend import figures, ids, url_state
from rlguard_frontend.api_client import ApiClient, ApiError
from rlguard_frontend.controls import control_id, controls_bar
from rlguard_frontend.pages.compare import data as compare_data
from rlguard_frontend.pages.compare.data import MAX_RUNS, SIGNAL_UNITS, ComparedRun
from rlguard_frontend.pages.compare.figures import LEGEND_MAX_RUNS, band_figure, compare_figure
from rlguard_frontend.pages.compare.state import CompareState
from rlguard_frontend.pages.compare.tables import config_table, delta_table, group_label, run_labels
from rlguard_frontend.pages.run.page import GRAPH_CONFIG
from rlguard_frontend.panel_views import view_from
from rlguard_frontend.traces import start_time

PREFIX = "compare"
BAND_OPTIONS = [{"label": " ±1 std", "value": "std"}, {"label": " min–max", "value": "minmax"}]
GROUP_BINS = 500


def layout(query: str = "", client: ApiClient | None = None, theme: str | None = None) -> html.Div:
    """The page as the URL's ``query`` describes it, drawn when a ``client`` is given (the
    first layout then brings the charts and the pickers' choices: no round trip after the
    page starts)."""
    state = CompareState.from_query(query)
    runs = list(state.runs[:MAX_RUNS])
    drawn: tuple[Any, Any, Any, str] = ([], [], [], "")
    run_options = [{"label": r, "value": r} for r in runs]
    grouping = grouping_options([], runs, state.baseline, list(state.group_by))
    if client is not None:
        drawn, compared = _drawn_view(client, state.with_changes(theme=state.theme or theme))
        grouping = grouping_options(compared, runs, state.baseline, list(state.group_by))
        with contextlib.suppress(ApiError):  # the page says so; the picker keeps its runs
            run_options = choosable_runs(client, runs)
    picker = dcc.Dropdown(
        id=ids.COMPARE_RUNS,
        value=runs,
        options=run_options,
        multi=True,
        placeholder=f"pick runs to compare (up to {MAX_RUNS})",
        className="compare-picker",
    )
    baseline_options, baseline, group_options = grouping
    controls = html.Div(
        [
            html.Label(
                [
                    html.Span("baseline", className="control-label"),
                    dcc.Dropdown(
                        id=ids.COMPARE_BASELINE,
                        value=baseline,
                        options=baseline_options,
                        clearable=False,
                        className="filter",
                    ),
                ]
            ),
            html.Label(
                [
                    html.Span("group by", className="control-label"),
                    dcc.Dropdown(
                        id=ids.COMPARE_GROUP_BY,
                        value=list(state.group_by),
                        options=group_options,
                        multi=True,
                        placeholder="config keys (seed left out)",
                        className="filter filter-wide",
                    ),
                ]
            ),
            dcc.RadioItems(
                id=ids.COMPARE_BAND, options=BAND_OPTIONS, value=state.band, inline=True
            ),
            html.Label(
                [
                    html.Span("panels", className="control-label"),
                    dcc.Dropdown(
                        id=ids.COMPARE_SIGNALS,
                        value=list(state.signals),
                        options=[{"label": s, "value": s} for s in SIGNAL_UNITS],
                        multi=True,
                        placeholder="every signal the runs log",
                        className="filter filter-wide",
                    ),
                ]
            ),
            html.Label(
                [
                    html.Span("steps", className="control-label"),
                    _step_input(ids.COMPARE_FROM, state.from_step, "from"),
                    _step_input(ids.COMPARE_TO, state.to_step, "to"),
                ]
            ),
        ],
        className="filters",
    )
    return html.Div(
        [
            html.H2("Compare runs"),
            dcc.Store(id=ids.COMPARE_QUERY),
            picker,
            controls,
            controls_bar(
                PREFIX, live=False, smoothing=state.smoothing, log=state.log, xmode=state.xmode
            ),
            html.Div(drawn[3], id=ids.COMPARE_ERROR, className="error"),
            html.Div(drawn[1], id=ids.COMPARE_DELTAS, className="compare-deltas"),
            html.Div(drawn[0], id=ids.COMPARE_GRID, className="compare-grid"),
            html.Details(
                [html.Summary("config diff"), html.Div(drawn[2], id=ids.COMPARE_CONFIG)],
                open=True,
                className="compare-config",
            ),
        ],
        className="compare-page",
    )


def _step_input(element_id: str, value: int | None, placeholder: str) -> dcc.Input:
    return dcc.Input(
        id=element_id,
        type="number",
        min=0,
        step=1,
        value=value,
        placeholder=placeholder,
        debounce=True,
        className="filter-input filter-step",
    )


def state_from(
    runs: list[str] | None,
    baseline: str | None,
    group_by: list[str] | None,
    signals: list[str] | None,
    band: str | None,
    smoothing: float | None,
    log: list[str] | None,
    xmode: str | None,
    from_step: int | None,
    to_step: int | None,
    theme: str | None,
) -> CompareState:
    """The controls' values as one state (what the URL holds)."""
    query = CompareState(
        runs=tuple((runs or [])[:MAX_RUNS]),
        baseline=baseline,
        group_by=tuple(group_by or ()),
        signals=tuple(signals or ()),
        band=band or "std",
        smoothing=float(smoothing or 0),
        xmode=xmode or "step",
        log=bool(log),
        from_step=None if from_step is None else int(from_step),
        to_step=None if to_step is None else int(to_step),
        theme=theme,
    ).to_query()
    return CompareState.from_query(query)  # the same clean-up a pasted URL gets


def compare_view(client: ApiClient, state: CompareState) -> tuple[Any, Any, Any, str]:
    """(panel cards, delta table, config diff, error) for a state."""
    return _drawn_view(client, state)[0]


def _drawn_view(
    client: ApiClient, state: CompareState
) -> tuple[tuple[Any, Any, Any, str], list[RunPublic]]:
    """``compare_view``'s answer, and the runs it read (for the pickers' choices)."""
    if not state.runs:
        return ([html.P("Pick two or more runs.", className="empty")], [], [], ""), []
    baseline = state.baseline if state.baseline in state.runs else state.runs[0]
    # every run's markers while the legend names them; past that the baseline's (less clutter)
    few = len(state.runs) <= LEGEND_MAX_RUNS and not state.group_by
    try:
        runs = compare_data.read_runs(
            client,
            state.runs,
            state.smoothing,
            times=state.xmode != "step",
            span=state.span,
            signals=state.signals,
            marked=state.runs if few else (baseline,),
            marked_alerts=not state.group_by,  # bands draw the baseline's markers alone
        )
        groups = _groups(client, state, runs) if state.group_by else None
    except ApiError as exc:
        return ([], [], [], str(exc)), []
    if groups is not None:
        marks = next((r.marks for r in runs if r.run.id == baseline), None)
        cards = _band_cards(state, groups, marks.markers if marks else ())
    else:
        cards = _overlay_cards(state, runs)
    signals, rows = compare_data.deltas(runs, baseline, smoothed=state.smoothing > 0)
    labels = run_labels({r.run.id: r.run.name for r in runs})
    read = [r.run for r in runs]
    return (cards, delta_table(signals, rows, labels), config_table(read), ""), read


def _shown(state: CompareState) -> dict[str, str]:
    """The panels' signals and units, in registry order: the chosen ones, or every one."""
    return {s: u for s, u in SIGNAL_UNITS.items() if not state.signals or s in state.signals}


def _groups(client: ApiClient, state: CompareState, runs: list[ComparedRun]) -> Any:
    signals = [s for s in _shown(state) if any(s in r.series for r in runs)]
    if not signals:
        return []
    return client.read_groups(
        state.runs,
        signals,
        by=state.group_by,
        smoothing=state.smoothing,
        bins=GROUP_BINS,
        **state.span,
    ).data


def _view(state: CompareState, t0: float | None = None) -> figures.View:
    zoom = None
    if state.from_step is not None and state.to_step is not None:
        zoom = {"from": state.from_step, "to": state.to_step}
    log = ["log"] if state.log else []
    return view_from(state.smoothing, log, state.xmode, state.theme, zoom, t0)


def _overlay_cards(state: CompareState, runs: list[ComparedRun]) -> list[Any]:
    """One card per signal, every run a line; the marked runs' markers and alerts across each."""
    labels = run_labels({r.run.id: r.run.name for r in runs})
    view = _view(state)
    marks = [r.marks for r in runs]
    ids_read = [r.run.id for r in runs]
    baseline = ids_read.index(state.baseline) if state.baseline in ids_read else 0
    cards = []
    for signal, unit in _shown(state).items():
        lines = [(labels[r.run.id], r.series.get(signal), start_time(r.series)) for r in runs]
        if not any(series for _, series, _ in lines):
            continue
        figure = compare_figure(signal, unit, lines, view, marks, baseline)
        cards.append(_card(signal, figure))
    return cards or [html.P("These runs share no canonical signal.", className="empty")]


def _band_cards(
    state: CompareState, groups: list[Any], markers: Sequence[Mapping[str, Any]]
) -> list[Any]:
    """One card per signal, every group a band; the baseline's markers across each."""
    view = _view(state)
    cards = []
    for signal, unit in _shown(state).items():
        bands = [(group_label(g.key, len(g.runs)), g.signals.get(signal)) for g in groups]
        bands = [(label, b) for label, b in bands if b is not None and b.steps]
        if bands:
            figure = band_figure(unit, bands, state.band, view, markers)
            cards.append(_card(signal, figure))
    return cards or [html.P("These runs share no canonical signal.", className="empty")]


def _card(signal: str, figure: dict[str, Any]) -> html.Div:
    return html.Div(
        [html.H4(signal), dcc.Graph(figure=figure, config=GRAPH_CONFIG)], className="card"
    )


def run_choices(client: ApiClient, selected: list[str] | None) -> list[dict[str, str]]:
    """The newest runs to pick from, and the picked ones even when older."""
    try:
        return choosable_runs(client, selected)
    except ApiError:
        raise PreventUpdate from None


def choosable_runs(client: ApiClient, selected: list[str] | None) -> list[dict[str, str]]:
    """``run_choices``, raising ``ApiError`` when the API cannot list the runs."""
    runs = client.list_runs(limit=1000).data
    options = [{"label": f"{r.name or r.id} · {r.project}", "value": r.id} for r in runs]
    known = {r.id for r in runs}
    return options + [{"label": r, "value": r} for r in selected or [] if r not in known]


def grouping_choices(
    client: ApiClient, run_ids: list[str] | None, baseline: str | None, chosen: list[str] | None
) -> tuple[list[dict[str, str]], Any, list[dict[str, str]]]:
    """Baseline options and value, and the config keys the picked runs can be grouped by."""
    run_ids = (run_ids or [])[:MAX_RUNS]
    try:
        runs = [client.get_run(r) for r in run_ids]
    except ApiError:
        raise PreventUpdate from None
    options, value, keys = grouping_options(runs, run_ids, baseline, chosen)
    keep = no_update if value == baseline else value  # an unchanged value redraws nothing
    return options, keep, keys


def grouping_options(
    runs: Sequence[RunPublic], run_ids: Sequence[str], baseline: str | None, chosen: Any
) -> tuple[list[dict[str, str]], str | None, list[dict[str, str]]]:
    """Baseline options (the runs read, else their ids) and value, and the group-by keys."""
    if runs:
        labels = run_labels({r.id: r.name for r in runs})
        options = [{"label": labels[r.id], "value": r.id} for r in runs]
    else:
        options = [{"label": r, "value": r} for r in run_ids]
    keys = list(dict.fromkeys([*(chosen or []), *compare_data.group_keys(runs)]))
    value = baseline if baseline in run_ids else (run_ids[0] if run_ids else None)
    return options, value, [{"label": k.removeprefix("config."), "value": k} for k in keys]


def register(app: Dash, client: ApiClient) -> None:
    """Wire the compare page's callbacks to ``app``."""
    smoothing, log, xaxis = (control_id(PREFIX, n) for n in (ids.SMOOTHING, ids.LOG, ids.XAXIS))
    controls = [
        Input(ids.COMPARE_RUNS, "value"),
        Input(ids.COMPARE_BASELINE, "value"),
        Input(ids.COMPARE_GROUP_BY, "value"),
        Input(ids.COMPARE_SIGNALS, "value"),
        Input(ids.COMPARE_BAND, "value"),
        Input(smoothing, "value"),
        Input(log, "value"),
        Input(xaxis, "value"),
        Input(ids.COMPARE_FROM, "value"),
        Input(ids.COMPARE_TO, "value"),
    ]

    # the first layout comes with the pickers' choices; a change of runs lists them again
    @app.callback(
        Output(ids.COMPARE_RUNS, "options"),
        Input(ids.COMPARE_RUNS, "value"),
        prevent_initial_call=True,
    )
    def list_run_options(selected: list[str] | None) -> list[dict[str, str]]:
        return run_choices(client, selected)

    @app.callback(
        Output(ids.COMPARE_BASELINE, "options"),
        Output(ids.COMPARE_BASELINE, "value"),
        Output(ids.COMPARE_GROUP_BY, "options"),
        Input(ids.COMPARE_RUNS, "value"),
        State(ids.COMPARE_BASELINE, "value"),
        State(ids.COMPARE_GROUP_BY, "value"),
        prevent_initial_call=True,
    )
    def list_grouping(run_ids, baseline, chosen) -> tuple:
        return grouping_choices(client, run_ids, baseline, chosen)

    @app.callback(
        Output(ids.COMPARE_GRID, "children"),
        Output(ids.COMPARE_DELTAS, "children"),
        Output(ids.COMPARE_CONFIG, "children"),
        Output(ids.COMPARE_ERROR, "children"),
        *controls,
        Input(ids.THEME, "data"),
        prevent_initial_call=True,  # the layout came drawn
    )
    def draw_compare(*values: Any) -> tuple:
        return compare_view(client, state_from(*values))

    @app.callback(
        Output(ids.COMPARE_QUERY, "data"),
        *controls,
        State(ids.THEME, "data"),  # carried into the link with the next change of view
        State(ids.URL, "search"),
        prevent_initial_call=True,
    )
    def keep_in_url(*values: Any) -> dict[str, str]:
        """Each change of view becomes a history entry: back/forward and copied links work."""
        if len(ctx.triggered) != 1:
            raise PreventUpdate  # the page was just built (from this URL): nothing changed
        return url_for(state_from(*values[:-1]), values[-1])

    url_state.push_to_url(app, ids.COMPARE_QUERY)


def url_for(state: CompareState, search: str | None) -> dict[str, str]:
    """The URL search and page location of a state; unchanged when the URL already says it."""
    return url_state.url_for(state, search, "/compare")
