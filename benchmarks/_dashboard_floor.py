"""The floor of the many-runs views: what Dash, Plotly and AG Grid cost on this machine.

A minimal Dash app, served as rlguard serves its dashboard (uvicorn, a2wsgi, gzip, the
dashboard's plotly.js bundle in the page's HTML), drawing the same amount that rlguard's page
draws but with no API behind it: the charts page comes with its figures in the first layout
(random walks drawn by the compare page's own figure builder, so with its legend, hover and
traces; no markers, no tables), the run page's floor is its panel cards, each a graph drawn by
the run page's own panel builder (lines only: no guides, alerts or markers) in the first layout,
above a plain list of the other keys, and the grid page is AG Grid over the runs page's own
columns and options, its rows served from memory by one callback. The benchmark times it in
the same browser and run as rlguard's page, so ``rlguard − floor`` is what rlguard adds.

``python -m benchmarks._dashboard_floor charts --runs 50 --panels 9 --points 100`` (or
``bands --runs 5 --panels 4 --points 500``, ``run --runs 2 --panels 6 --points 2000 --keys 31``,
or ``grid --runs 5000``) prints
``listening on URL`` and serves until stopped.
"""

from __future__ import annotations

import argparse
import random
from typing import Any

import dash_ag_grid as dag
from dash import Dash, Input, Output, dcc, html

from benchmarks._support import serving
from rlguard_backend.schemas import SeriesData
from rlguard_frontend import plotly_bundle
from rlguard_frontend.figures import Line, PanelContent, View, panel_figure
from rlguard_frontend.pages.compare.figures import compare_figure
from rlguard_frontend.pages.runs.columns import DEFAULT_COLUMNS, column_defs
from rlguard_frontend.pages.runs.grid import count_text
from rlguard_frontend.pages.runs.page import GRID_OPTIONS


def _walk(points: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    value, out = 0.0, []
    for _ in range(points):
        value += rng.gauss(0, 0.05)
        out.append(round(value, 6))
    return out


def _figure(lines: int, points: int, banded: bool, panel: int) -> dict[str, Any]:
    steps = list(range(0, points * 10, 10))
    walks = [_walk(points, panel * 1000 + line) for line in range(lines)]
    if not banded:  # drawn as the compare page draws its runs (legend, hover, traces)
        runs = [(f"run {line}", _series(steps, walk), None) for line, walk in enumerate(walks)]
        return compare_figure(f"panel {panel}", "", runs, View())
    data: list[dict[str, Any]] = []
    for mean in walks:  # a filled band around the line, as the grouped view draws it
        data.append(
            {
                "type": "scatter",
                "x": steps + steps[::-1],
                "y": [v + 0.1 for v in mean] + [v - 0.1 for v in mean[::-1]],
                "fill": "toself",
                "line": {"width": 0},
                "meta": {"role": "band"},
            }
        )
        data.append(
            {"type": "scatter", "mode": "lines", "x": steps, "y": mean, "meta": {"role": "mean"}}
        )
    return {"data": data, "layout": {"height": 300, "margin": {"l": 50, "r": 10, "t": 10}}}


def _series(steps: list[int], values: list[float]) -> SeriesData:
    return SeriesData.model_construct(
        steps=steps,
        values=values,
        downsampled=False,
        method="raw",
        total_points=len(steps),
        last_step=steps[-1] if steps else None,
    )


def charts_layout(lines: int, panels: int, points: int, banded: bool) -> html.Div:
    """``panels`` cards, each a graph of ``lines`` lines (or bands) of ``points`` points."""
    cards = [
        html.Div(
            [html.H4(f"panel {p}"), dcc.Graph(figure=_figure(lines, points, banded, p))],
            className="card",
        )
        for p in range(panels)
    ]
    return html.Div(cards, className="compare-grid")


def run_layout(lines: int, panels: int, points: int, keys: int) -> html.Div:
    """The run page's drawing: ``panels`` cards of ``lines`` lines of ``points`` points each,
    drawn by its panel builder, and ``keys`` listed keys."""
    steps = list(range(0, points * 10, 10))
    cards = []
    for panel in range(panels):
        drawn = [
            Line(f"key {line}", _series(steps, _walk(points, panel * 1000 + line)))
            for line in range(lines)
        ]
        figure = panel_figure(PanelContent(lines=drawn), View())
        graph = dcc.Graph(figure=figure, config={"displaylogo": False}, className="graph")
        cards.append(html.Div([html.H4(f"panel {panel}"), graph], className="card"))
    listed = [
        html.Div(
            [html.Span(f"custom/metric_{k:02d}", className="key-name"), html.Span("0.5")],
            className="key-row",
        )
        for k in range(keys)
    ]
    return html.Div([html.Div(cards, className="panels"), html.Div(listed)], className="run-page")


def grid_app(app: Dash, runs: int) -> None:
    """The runs page's grid over ``runs`` rows held in memory; a name filter narrows them."""
    rows: list[dict[str, Any]] = [
        {
            "id": f"floor-{i:05d}",
            "link": f"[floor-{i:05d}](/runs/floor-{i:05d})",
            "name": f"sweep-{i:05d}",
            "project": "floor",
            "status": "finished",
            "health": "ok",
            "last_step": 1000,
            "age": "1m",
            "tags": "",
            **{c: i % 7 for c in DEFAULT_COLUMNS},
        }
        for i in range(runs)
    ]
    app.layout = html.Div(
        [
            html.Span(id="floor-count", className="runs-count"),
            dag.AgGrid(
                id="floor-grid",
                columnDefs=column_defs(list(DEFAULT_COLUMNS), [], {}),
                defaultColDef={"sortable": True, "resizable": True, "floatingFilter": True},
                rowModelType="infinite",
                dashGridOptions=GRID_OPTIONS,
                getRowId="params.data.id",
                columnSize="autoSize",
                className="ag-theme-quartz runs-grid",
            ),
        ]
    )

    @app.callback(
        Output("floor-grid", "getRowsResponse"),
        Output("floor-count", "children"),
        Input("floor-grid", "getRowsRequest"),
    )
    def serve_rows(request: dict[str, Any] | None) -> tuple:
        request = request or {}
        wanted = ((request.get("filterModel") or {}).get("name") or {}).get("filter") or ""
        matching = [r for r in rows if wanted in r["name"]]
        start, end = int(request.get("startRow") or 0), int(request.get("endRow") or 50)
        page = {"rowData": matching[start:end], "rowCount": len(matching)}
        return page, count_text(len(matching), len(rows))


def floor_app(view: str, runs: int, panels: int, points: int, keys: int = 0) -> Dash:
    """The floor page of a ``view`` (charts, bands, run or grid)."""
    if view == "grid":
        app = Dash(__name__, update_title=None)  # type: ignore[arg-type]
        grid_app(app, runs)
        return app
    url = plotly_bundle.script_url("/")
    app = Dash(__name__, update_title=None, external_scripts=[url] if url else [])  # type: ignore[arg-type]
    if url:
        plotly_bundle.install(app.server, url)
    if view == "run":
        app.layout = run_layout(runs, panels, points, keys)
    else:
        app.layout = charts_layout(runs, panels, points, view == "bands")
    return app


def floor_up(view: str, runs: int, panels: int = 1, points: int = 0, keys: int = 0) -> Any:
    """The floor page of a ``view`` in a subprocess; yields its base URL."""
    sizes = ["--runs", str(runs), "--panels", str(panels), "--points", str(points)]
    sizes += ["--keys", str(keys)]
    return serving(["benchmarks._dashboard_floor", view, *sizes])


def main() -> None:
    """Serve one floor page on a free loopback port until stopped."""
    from rlguard_backend.core.config import Settings
    from rlguard_backend.core.serve import base_url, bind_socket, serve_socket
    from rlguard_frontend.asgi import dashboard_asgi

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("view", choices=("charts", "bands", "run", "grid"))
    parser.add_argument("--runs", type=int, required=True, help="lines, groups or grid rows")
    parser.add_argument("--panels", type=int, default=1)
    parser.add_argument("--points", type=int, default=200, help="points per line")
    parser.add_argument("--keys", type=int, default=0, help="listed keys (run)")
    args = parser.parse_args()
    app = floor_app(args.view, args.runs, args.panels, args.points, args.keys)
    sock = bind_socket("127.0.0.1", 0)
    print(f"floor listening on {base_url(sock)}", flush=True)
    serve_socket(dashboard_asgi(app), sock, Settings())


if __name__ == "__main__":
    main()
