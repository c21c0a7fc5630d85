"""The run page: stability panels from the registry, drawn by one callback, updated live."""

from __future__ import annotations

import json
import math
from typing import Any

from dash import ALL, Dash, Input, Output, State, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from rlguard_backend.schemas import AlertPublic, RunPublic
from rlguard_frontend import figures, ids, panel_views, run_state, traces
from rlguard_frontend.api_client import ApiClient, ApiError
from rlguard_frontend.controls import control_id, controls_bar
from rlguard_frontend.panels import PANELS, all_keys, kl_target, plan_panels

PREFIX = "run"
PANEL_MAX_POINTS = 2000
MINI_MAX_POINTS = 400
LIVE_REDRAW_AFTER_POINTS = 1500  # then refetch downsampled history: traces stay ~2,000 points
GRAPH_CONFIG: Any = {"displaylogo": False, "modeBarButtonsToRemove": ["lasso2d", "select2d"]}
SEVERITY_ORDER = {"critical": 0, "warn": 1, "info": 2}


def _graph_id(panel_id: str) -> dict[str, str]:
    return {"type": ids.PANEL_GRAPH, "panel": panel_id}


def layout(run_id: str) -> html.Div:
    zoom_reset = html.Div(
        [
            html.Span("all steps", id=ids.RUN_ZOOM_LABEL, className="zoom-label"),
            html.Button("reset zoom", id=ids.RUN_ZOOM_RESET, className="button-small"),
        ],
        className="control",
    )
    return html.Div(
        [
            dcc.Store(id=ids.RUN_ID, data=run_id),
            dcc.Store(id=ids.RUN_PLAN),
            dcc.Store(id=ids.RUN_CURSOR),
            dcc.Store(id=ids.RUN_ZOOM),
            dcc.Store(id=ids.RUN_ALERTS, data=[]),
            dcc.Store(id=ids.RUN_REDRAW, data=0),
            html.Div(id=ids.RUN_HEADER, className="run-header"),
            html.Div(id=ids.RUN_ERROR, className="error"),
            controls_bar(PREFIX, live=True, extra=[zoom_reset]),
            html.Div(
                [
                    html.Div(id=ids.RUN_PANELS, className="panels"),
                    html.Aside(
                        [
                            html.H3("Alerts"),
                            html.Div(timeline([]), id=ids.RUN_TIMELINE, className="timeline"),
                            html.Div(id=ids.RUN_ALERT_DETAIL, className="alert-detail"),
                        ],
                        className="sidebar",
                    ),
                ],
                className="run-body",
            ),
            html.Section(
                [
                    html.Div(
                        [
                            html.H3("All other keys"),
                            dcc.Input(
                                id=ids.RUN_KEY_SEARCH,
                                placeholder="search keys…",
                                type="search",
                                className="search",
                            ),
                        ],
                        className="section-head",
                    ),
                    html.Div(id=ids.RUN_KEYS_GRID, className="mini-grid"),
                ],
                className="other-keys",
            ),
        ],
        className="run-page",
    )


def header(run: RunPublic) -> list[Any]:
    status = run_state.display_status(run)
    chips = [html.Span(f"{k} = {v}", className="chip") for k, v in run_state.headline_config(run)]
    chips += [html.Span(tag, className="chip chip-tag") for tag in run.tags]
    return [
        html.Div(
            [
                html.H2(run.name or run.id, className="run-title"),
                html.Span(status, id=ids.RUN_STATUS, className=f"badge status-{status}"),
            ],
            className="run-title-row",
        ),
        html.Div(
            [
                html.Span(["project ", html.B(run.project)]),
                html.Span(["run ", html.Code(run.id)]),
                html.Span(["last step ", html.B(_step(run.last_step), id=ids.RUN_LAST_STEP)]),
                html.Span(f"updated {run_state.age(run.updated_at)}"),
                dcc.Link("compare…", href=f"/compare?runs={run.id}"),
            ],
            className="run-meta",
        ),
        html.Div(chips, className="chips"),
    ]


def _step(step: int | None) -> str:
    return "—" if step is None else str(step)


def panel_cards(plan: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """Cards for the registry panels (or why one is empty) and the mini charts."""
    cards, empty = [], []
    for panel in PANELS:
        head = html.Div(
            [html.H4(panel.title), html.Span(panel.hint, className="hint")], className="card-head"
        )
        if panel.id in plan["panels"]:
            graph = dcc.Graph(id=_graph_id(panel.id), config=GRAPH_CONFIG, className="graph")
            cards.append(html.Div([head, graph], className="card"))
        else:
            wanted = ", ".join(panel.signals + panel.right) or "system metrics"
            message = f"No data: this run logs none of {wanted}."
            empty.append(
                html.Div([head, html.P(message, className="empty")], className="card card-empty")
            )
    minis: list[Any] = [
        html.Div(
            [
                html.Div(name, className="mini-title", title=name),
                dcc.Graph(id=_graph_id(mini), config={"displayModeBar": False}, className="graph"),
            ],
            id={"type": ids.MINI_CARD, "panel": mini},
            className="card mini",
        )
        for mini, name in plan["minis"].items()
    ]
    if not minis:
        minis = [html.P("No other keys.", className="empty")]
    return cards + empty, minis


def make_plan(client: ApiClient, run: RunPublic, previous: dict[str, Any] | None) -> dict[str, Any]:
    keys = client.list_keys(run.id).data
    plan = plan_panels([k.model_dump() for k in keys])
    plan["kl_target"] = kl_target(run.config)
    entropy = plan["panels"].get("entropy", {}).get("keys", [])
    plan["entropy_start"] = (previous or {}).get("entropy_start")
    described = next((k for k in keys if entropy and k.name == entropy[0]), None)
    recent = described is not None and described.count <= panel_views.ENTROPY_START_POINTS
    if described is not None and (plan["entropy_start"] is None or recent):
        first = described.first_step or 0
        head = client.read_series(
            run.id,
            entropy[:1],
            from_step=first,
            to_step=first + 4 * panel_views.ENTROPY_START_POINTS,
        )
        plan["entropy_start"] = panel_views.entropy_start(head.series[entropy[0]])
    return plan


def view_from(
    smoothing: float | None,
    log: list[str] | None,
    xmode: str | None,
    theme: str | None,
    zoom: dict[str, int] | None,
    t0: float | None = None,
) -> figures.View:
    xmode = xmode or "step"
    x_range = (zoom["from"], zoom["to"]) if zoom and xmode == "step" else None
    return figures.View(
        xmode=xmode,
        log=bool(log),
        smoothing=float(smoothing or 0),
        theme=theme or "light",
        t0=t0,
        x_range=x_range,
        uirevision=f"{xmode}:{json.dumps(zoom)}:{bool(log)}",
    )


def timeline(alerts: list[AlertPublic]) -> list[Any]:
    if not alerts:
        return [html.P("No alerts. The limiters look healthy.", className="empty")]
    ordered = sorted(
        alerts, key=lambda a: (a.status != "open", SEVERITY_ORDER[a.severity], a.first_step)
    )
    return [
        html.Button(
            [
                html.Span(alert.severity, className=f"sev sev-{alert.severity}"),
                html.Span(alert.detector, className="detector"),
                html.Span(f"steps {alert.first_step}–{alert.last_step}", className="steps"),
                html.Span(
                    alert.status + (" · ack" if alert.acknowledged else ""), className="astatus"
                ),
            ],
            id={"type": ids.ALERT_ITEM, "alert": alert.id},
            className=f"alert-item alert-{alert.status}",
        )
        for alert in ordered
    ]


def alert_detail(alert: AlertPublic) -> list[Any]:
    evidence = [
        html.Tr([html.Th(str(k)), html.Td(json.dumps(v) if not isinstance(v, str) else v)])
        for k, v in alert.evidence.items()
    ]
    return [
        html.H4(
            [html.Span(alert.severity, className=f"sev sev-{alert.severity}"), " ", alert.detector]
        ),
        html.P(f"steps {alert.first_step}–{alert.last_step} · {alert.status}", className="hint"),
        html.P(alert.message, className="alert-message"),
        html.H5("Evidence"),
        html.Table(evidence, className="evidence") if evidence else html.P("—"),
        html.H5("What to try"),
        html.Ul([html.Li(str(item)) for item in alert.advice]) if alert.advice else html.P("—"),
    ]


def _alerts(data: list[dict[str, Any]] | None) -> list[AlertPublic]:
    return [AlertPublic.model_validate(a) for a in data or []]


def _alert_signature(alerts: list[AlertPublic]) -> list[tuple[Any, ...]]:
    return sorted((a.id, a.status, a.severity, a.acknowledged, a.first_step) for a in alerts)


def register(app: Dash, client: ApiClient) -> None:
    smoothing, log, xaxis, live = (
        control_id(PREFIX, n) for n in (ids.SMOOTHING, ids.LOG, ids.XAXIS, ids.LIVE)
    )

    @app.callback(
        Output(ids.RUN_HEADER, "children"),
        Output(ids.RUN_ERROR, "children"),
        Output(ids.RUN_PLAN, "data"),
        Output(ids.RUN_PANELS, "children"),
        Output(ids.RUN_KEYS_GRID, "children"),
        Input(ids.TICK, "n_intervals"),
        Input(ids.RUN_ID, "data"),
        State(ids.RUN_PLAN, "data"),
    )
    def refresh_run(_tick: int | None, run_id: str, previous: dict[str, Any] | None) -> tuple:
        try:
            run = client.get_run(run_id)
            plan = make_plan(client, run, previous)
        except ApiError as exc:
            return no_update, str(exc), no_update, no_update, no_update
        if plan == previous:
            return header(run), "", no_update, no_update, no_update
        cards, minis = panel_cards(plan)
        return header(run), "", plan, cards, minis

    @app.callback(
        Output({"type": ids.PANEL_GRAPH, "panel": ALL}, "figure"),
        Output(ids.RUN_CURSOR, "data"),
        Input(ids.RUN_PLAN, "data"),
        Input(smoothing, "value"),
        Input(log, "value"),
        Input(xaxis, "value"),
        Input(ids.RUN_ZOOM, "data"),
        Input(ids.RUN_ALERTS, "data"),
        Input(ids.THEME, "data"),
        Input(ids.RUN_REDRAW, "data"),
        State(ids.RUN_ID, "data"),
    )
    def draw_panels(plan, smooth, log_on, xmode, zoom, alerts, theme, _redraw, run_id) -> tuple:
        panel_ids = [o["id"]["panel"] for o in ctx.outputs_list[0]]
        if not plan or not panel_ids:
            raise PreventUpdate
        span = {"from_step": zoom["from"], "to_step": zoom["to"]} if zoom else {}
        minis = set(plan["minis"].values())
        main_keys = [k for k in all_keys(plan) if k not in minis]
        series = {}
        try:
            for keys, points in ((main_keys, PANEL_MAX_POINTS), (sorted(minis), MINI_MAX_POINTS)):
                if keys:
                    answer = client.read_series(
                        run_id, keys, max_points=points, smoothing=smooth or 0, **span
                    )
                    series.update(answer.series)
        except ApiError:
            raise PreventUpdate from None
        view = view_from(smooth, log_on, xmode, theme, zoom, traces.start_time(series))
        built = panel_views.build_figures(panel_ids, plan, series, _alerts(alerts), view)
        cursor = {
            "cursor": {k: (s.steps[-1] if s.steps else -1) for k, s in series.items()},
            "traces": {p: figures.trace_index(f) for p, f in zip(panel_ids, built, strict=True)},
            "tails": panel_views.smoothed_tails(series),
            "t0": view.t0,
            "frozen": bool(zoom),
            "appended": 0,
        }
        return built, cursor

    @app.callback(
        Output({"type": ids.PANEL_GRAPH, "panel": ALL}, "extendData"),
        Output(ids.RUN_CURSOR, "data", allow_duplicate=True),
        Output(ids.RUN_REDRAW, "data"),
        Input(ids.TICK, "n_intervals"),
        State(ids.RUN_CURSOR, "data"),
        State(live, "value"),
        State(smoothing, "value"),
        State(xaxis, "value"),
        State(ids.RUN_ID, "data"),
        State(ids.RUN_REDRAW, "data"),
        prevent_initial_call=True,
    )
    def extend_panels(_tick, state, live_on, smooth, xmode, run_id, redraw) -> tuple:
        if not state or not live_on or state["frozen"]:
            raise PreventUpdate
        cursor: dict[str, int] = state["cursor"]
        if not cursor:
            raise PreventUpdate
        try:
            answer = client.read_series(
                run_id, list(cursor), after_step=min(cursor.values()), max_points=PANEL_MAX_POINTS
            )
        except ApiError:
            raise PreventUpdate from None
        view = view_from(smooth, None, xmode, None, None, state["t0"])
        payloads, appended = [], 0
        for output in ctx.outputs_list[0]:
            trace_map = state["traces"].get(output["id"]["panel"], {})
            payload, moved, tails, count = panel_views.extension(
                trace_map, cursor, state["tails"], answer.series, view
            )
            cursor = {**cursor, **moved}
            state["tails"].update(tails)
            appended = max(appended, count)
            payloads.append(no_update if payload is None else payload)
        if appended == 0:
            raise PreventUpdate
        state = {**state, "cursor": cursor, "appended": state["appended"] + appended}
        if state["appended"] > LIVE_REDRAW_AFTER_POINTS:
            return payloads, state, (redraw or 0) + 1
        return payloads, state, no_update

    @app.callback(
        Output(ids.RUN_ALERTS, "data"),
        Output(ids.RUN_TIMELINE, "children"),
        Input(ids.TICK, "n_intervals"),
        Input(ids.RUN_ID, "data"),
        State(ids.RUN_ALERTS, "data"),
    )
    def refresh_alerts(
        _tick: int | None, run_id: str, previous: list[dict[str, Any]] | None
    ) -> tuple:
        try:
            alerts = client.list_alerts(run_id).data
        except ApiError:
            raise PreventUpdate from None
        if _alert_signature(alerts) == _alert_signature(_alerts(previous)):
            raise PreventUpdate
        return [a.model_dump(mode="json") for a in alerts], timeline(alerts)

    @app.callback(
        Output(ids.RUN_ALERT_DETAIL, "children"),
        Input({"type": ids.ALERT_ITEM, "alert": ALL}, "n_clicks"),
        Input({"type": ids.PANEL_GRAPH, "panel": ALL}, "clickData"),
        State(ids.RUN_ALERTS, "data"),
        prevent_initial_call=True,
    )
    def show_alert(_clicks, _graph_clicks, alerts) -> Any:
        trigger = ctx.triggered_id
        if not isinstance(trigger, dict) or not ctx.triggered[0]["value"]:
            raise PreventUpdate
        if trigger["type"] == ids.ALERT_ITEM:
            wanted = trigger["alert"]
        else:
            point = ctx.triggered[0]["value"]["points"][0]
            wanted = point.get("customdata")
        chosen = next((a for a in _alerts(alerts) if a.id == wanted), None)
        if chosen is None:
            raise PreventUpdate
        return alert_detail(chosen)

    @app.callback(
        Output(ids.RUN_ZOOM, "data"),
        Output(ids.RUN_ZOOM_LABEL, "children"),
        Input({"type": ids.PANEL_GRAPH, "panel": ALL}, "relayoutData"),
        Input(ids.RUN_ZOOM_RESET, "n_clicks"),
        State(xaxis, "value"),
        State(ids.RUN_ZOOM, "data"),
        prevent_initial_call=True,
    )
    def share_zoom(_relayouts, _reset, xmode, current) -> tuple:
        if ctx.triggered_id == ids.RUN_ZOOM_RESET:
            return None, "all steps"
        event = ctx.triggered[0]["value"] or {}
        if xmode != "step" or not isinstance(event, dict):
            raise PreventUpdate
        if event.get("xaxis.autorange"):
            return (None, "all steps") if current else (no_update, no_update)
        if "xaxis.range[0]" not in event:
            raise PreventUpdate
        lo = max(0, math.floor(float(event["xaxis.range[0]"])))
        hi = math.ceil(float(event["xaxis.range[1]"]))
        zoom = {"from": lo, "to": max(hi, lo)}
        return (no_update, no_update) if zoom == current else (zoom, f"steps {lo}–{hi}")

    @app.callback(
        Output({"type": ids.MINI_CARD, "panel": ALL}, "style"),
        Input(ids.RUN_KEY_SEARCH, "value"),
        State(ids.RUN_PLAN, "data"),
    )
    def filter_keys(query: str | None, plan: dict[str, Any] | None) -> list[dict[str, str]]:
        names = [(plan or {}).get("minis", {}).get(o["id"]["panel"], "") for o in ctx.outputs_list]
        wanted = (query or "").strip().lower()
        return [{} if wanted in name.lower() else {"display": "none"} for name in names]
