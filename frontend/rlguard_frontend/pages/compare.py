"""The compare page: several runs overlaid per canonical signal, the legend naming the runs."""

from __future__ import annotations

from typing import Any

from dash import Dash, Input, Output, dcc, html
from dash.exceptions import PreventUpdate

from rlguard_backend.schemas import SeriesData
from rlguard_frontend import figures, ids, run_data
from rlguard_frontend.api_client import ApiClient, ApiError
from rlguard_frontend.controls import control_id, controls_bar
from rlguard_frontend.pages.run_detail import GRAPH_CONFIG
from rlguard_frontend.panel_views import view_from
from rlguard_frontend.panels import PANELS
from rlguard_frontend.traces import start_time

PREFIX = "compare"
MAX_RUNS = 8
# signal -> axis unit, in registry order (the order of the panels on a run page)
SIGNAL_UNITS: dict[str, str] = {}
for _panel in PANELS:
    SIGNAL_UNITS.update({s: _panel.unit for s in _panel.signals})
    SIGNAL_UNITS.update({s: _panel.right_unit for s in _panel.right})


def layout(run_ids: list[str]) -> html.Div:
    picker = dcc.Dropdown(
        id=ids.COMPARE_RUNS,
        value=run_ids[:MAX_RUNS],
        options=[{"label": r, "value": r} for r in run_ids[:MAX_RUNS]],
        multi=True,
        placeholder="pick runs to compare",
        className="compare-picker",
    )
    return html.Div(
        [
            html.H2("Compare runs"),
            picker,
            controls_bar(PREFIX, live=False),
            html.Div(id=ids.COMPARE_ERROR, className="error"),
            html.Div(id=ids.COMPARE_GRID, className="compare-grid"),
        ],
        className="compare-page",
    )


def run_labels(names: dict[str, str | None]) -> dict[str, str]:
    """Legend names: the run's name, disambiguated by its id when two runs share one."""
    counts: dict[str, int] = {}
    for name in names.values():
        counts[name or ""] = counts.get(name or "", 0) + 1
    return {
        run_id: (name if name and counts[name] == 1 else f"{name} ({run_id})" if name else run_id)
        for run_id, name in names.items()
    }


def signal_series(
    client: ApiClient, run_id: str, smoothing: float, times: bool = True
) -> dict[str, SeriesData]:
    """Per canonical signal, the run's first key of that signal."""
    chosen: dict[str, str] = {}
    for key in client.list_keys(run_id).data:
        if key.signal in SIGNAL_UNITS and key.signal not in chosen:
            chosen[key.signal] = key.name
    if not chosen:
        return {}
    answer = client.read_series(run_id, list(chosen.values()), smoothing=smoothing, times=times)
    return {signal: answer.series[name] for signal, name in chosen.items()}


def register(app: Dash, client: ApiClient) -> None:
    smoothing, log, xaxis = (control_id(PREFIX, n) for n in (ids.SMOOTHING, ids.LOG, ids.XAXIS))

    @app.callback(Output(ids.COMPARE_RUNS, "options"), Input(ids.COMPARE_RUNS, "value"))
    def list_run_options(selected: list[str] | None) -> list[dict[str, str]]:
        try:
            runs = client.list_runs(limit=500).data
        except ApiError:
            raise PreventUpdate from None
        options = [{"label": f"{r.name or r.id} · {r.project}", "value": r.id} for r in runs]
        known = {r.id for r in runs}
        return options + [{"label": r, "value": r} for r in selected or [] if r not in known]

    @app.callback(
        Output(ids.COMPARE_GRID, "children"),
        Output(ids.COMPARE_ERROR, "children"),
        Input(ids.COMPARE_RUNS, "value"),
        Input(smoothing, "value"),
        Input(log, "value"),
        Input(xaxis, "value"),
        Input(ids.THEME, "data"),
    )
    def draw_compare(run_ids, smooth, log_on, xmode, theme) -> tuple:
        run_ids = (run_ids or [])[:MAX_RUNS]
        if not run_ids:
            return [html.P("Pick two or more runs.", className="empty")], ""
        try:
            labels = run_labels({r: client.get_run(r).name for r in run_ids})
            times = run_data.needs_times(xmode)
            data = {r: signal_series(client, r, smooth or 0, times) for r in run_ids}
        except ApiError as exc:
            return [], str(exc)
        starts = {r: start_time(series) for r, series in data.items()}
        view = view_from(smooth, log_on, xmode, theme, None)
        cards: list[Any] = []
        for signal, unit in SIGNAL_UNITS.items():
            runs = [(labels[r], data[r].get(signal), starts[r]) for r in run_ids]
            if not any(series for _, series, _ in runs):
                continue
            figure = figures.compare_figure(signal, unit, runs, view)
            cards.append(
                html.Div(
                    [html.H4(signal), dcc.Graph(figure=figure, config=GRAPH_CONFIG)],
                    className="card",
                )
            )
        return cards or [html.P("These runs share no canonical signal.", className="empty")], ""
