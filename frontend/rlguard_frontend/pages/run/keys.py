"""The run page's other keys: one searchable list (name, last value, a sparkline on demand)
whose picked keys are drawn as charts.

A verl run logs 100+ keys besides the stability panels; a Plotly chart each would cost ~0.1 s
of browser time apiece, so a key becomes a chart only when picked.
"""

from __future__ import annotations

from typing import Any

from dash import ALL, MATCH, Dash, Input, Output, Patch, State, ctx, dcc, html
from dash.exceptions import PreventUpdate

from rlguard_frontend import ids
from rlguard_frontend.api_client import ApiClient
from rlguard_frontend.pages.run import callbacks as run_callbacks
from rlguard_frontend.pages.run import data as run_data

CHART_CONFIG: Any = {"displayModeBar": False}
SPARK_GLYPH = "∿"


def other_keys(
    plan: dict[str, Any],
    values: dict[str, Any],
    search: str,
    picked: list[str],
    drawn: dict[str, dict[str, Any]] | None = None,
) -> list[Any]:
    """The picked keys' charts (with their figures when ``drawn``), how many keys the search
    shows, then the list of keys."""
    names = plan["minis"]
    charts = [picked_chart(m, names[m], drawn or {}) for m in run_data.picked_ids(plan, picked)]
    rows = [key_row(m, name, values.get(name), search, name in picked) for m, name in names.items()]
    count = run_callbacks.key_count(list(names.values()), search)
    return [
        html.Div(charts, id=ids.RUN_PICKED_CHARTS, className="picked-charts"),
        html.P(
            [html.Span(count, id=ids.RUN_KEY_COUNT), " · a name draws its chart, ∿ its trend"],
            className="hint key-count",
        ),
        html.Div(
            rows or [html.P("No other keys.", className="empty")],
            id=ids.RUN_KEY_LIST,
            className="key-list",
        ),
    ]


def key_row(mini: str, name: str, value: Any, search: str, picked: bool) -> html.Div:
    """One key: its name (a click draws its chart), last value and a button that turns into
    its sparkline."""
    return html.Div(
        [
            html.Button(
                name, id={"type": ids.KEY_PICK, "panel": mini}, className="key-name", title=name
            ),
            html.Span(
                run_data.value_text(value),
                id={"type": ids.KEY_VALUE, "panel": mini},
                className="key-value",
            ),
            html.Button(
                SPARK_GLYPH,
                id={"type": ids.KEY_SPARK, "panel": mini},
                className="key-spark",
                title="the key's trend: click to show, again to hide",
            ),
        ],
        id={"type": ids.KEY_ROW, "panel": mini},
        className=row_class(picked),
        style=run_callbacks.key_style(name, search),
    )


def row_class(picked: bool) -> str:
    """A row's class: picked rows stand out."""
    return "key-row picked" if picked else "key-row"


def picked_chart(mini: str, name: str, drawn: dict[str, dict[str, Any]]) -> html.Div:
    """The chart of a picked key (its figure when drawn, else the next redraw draws it)."""
    figure: dict[str, Any] = {"figure": drawn[mini]} if mini in drawn else {}
    return html.Div(
        [
            html.Div(name, className="mini-title", title=name),
            dcc.Graph(id=ids.panel_graph(mini), **figure, config=CHART_CONFIG, className="graph"),
        ],
        className="card mini",
    )


def register(app: Dash, client: ApiClient, controls: dict[str, str]) -> None:
    """The list's callbacks: filter, sparklines, picks; ``controls`` names the page's control
    ids (``smoothing``, ``log``, ``xaxis``)."""

    @app.callback(
        Output({"type": ids.KEY_ROW, "panel": ALL}, "style"),
        Output(ids.RUN_KEY_COUNT, "children"),
        Input(ids.RUN_KEY_SEARCH, "value"),
        State(ids.RUN_PLAN, "data"),  # as an Input, Dash holds it while a tick refreshes
        prevent_initial_call=True,
    )
    def filter_keys(search: str | None, plan: dict[str, Any] | None) -> tuple:
        names = (plan or {}).get("minis", {})
        shown = [names.get(o["id"]["panel"], "") for o in ctx.outputs_list[0]]
        styles = [run_callbacks.key_style(name, search) for name in shown]
        return styles, run_callbacks.key_count(list(names.values()), search)

    @app.callback(
        Output({"type": ids.KEY_SPARK, "panel": MATCH}, "children"),
        Input({"type": ids.KEY_SPARK, "panel": MATCH}, "n_clicks"),
        State(ids.RUN_PLAN, "data"),
        State(ids.RUN_ID, "data"),
        prevent_initial_call=True,
    )
    def toggle_sparkline(clicks: int | None, plan: dict[str, Any] | None, run_id: str) -> Any:
        name = (plan or {}).get("minis", {}).get(ctx.triggered_id["panel"])
        if not clicks or name is None:
            raise PreventUpdate
        if clicks % 2 == 0:
            return SPARK_GLYPH  # the second click hides it
        source = run_callbacks.sparkline_source(client, run_id, name)
        return html.Img(src=source, alt=f"trend of {name}") if source else "no points"

    @app.callback(
        Output(ids.RUN_PICKED, "data"),
        Output(ids.RUN_PICKED_CHARTS, "children"),
        Output({"type": ids.KEY_ROW, "panel": ALL}, "className"),
        Output(ids.RUN_CURSOR, "data", allow_duplicate=True),
        Input({"type": ids.KEY_PICK, "panel": ALL}, "n_clicks"),
        State(ids.RUN_PICKED, "data"),
        State(ids.RUN_PLAN, "data"),
        State(ids.RUN_CURSOR, "data"),
        State(ids.RUN_ID, "data"),
        State(controls["smoothing"], "value"),
        State(controls["log"], "value"),
        State(controls["xaxis"], "value"),
        State(ids.RUN_ZOOM, "data"),
        State(ids.THEME, "data"),
        prevent_initial_call=True,
    )
    def pick_key(_clicks, picked, plan, state, run_id, smooth, log_on, xmode, zoom, theme):
        """A click on a key's name draws its chart; a second click takes it away."""
        trigger = ctx.triggered_id
        if not isinstance(trigger, dict) or not ctx.triggered[0]["value"] or not plan or not state:
            raise PreventUpdate  # rows just drawn, or a page without its plan
        mini = trigger["panel"]
        name = plan["minis"].get(mini)
        if name is None:
            raise PreventUpdate  # a row of a list the last tick replaced
        now = run_callbacks.toggled(picked, name)
        rows = [row_class(plan["minis"][o["id"]["panel"]] in now) for o in ctx.outputs_list[2]]
        charts = Patch()
        if name in (picked or []):
            del charts[run_data.picked_ids(plan, picked).index(mini)]
            return now, charts, rows, run_callbacks.without_chart(state, mini)
        controls = {"smoothing": smooth, "log": log_on, "xmode": xmode, "zoom": zoom}
        figure, state = run_callbacks.draw_picked(
            client, run_id, mini, plan, state, {**controls, "theme": theme}
        )
        charts.append(picked_chart(mini, name, {mini: figure}))
        return now, charts, rows, state
