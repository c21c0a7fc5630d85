"""The run page: stability panels from the registry, drawn by one callback, updated live;
the other keys as a list (``keys``)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dash import ALL, ClientsideFunction, Dash, Input, Output, State, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from rlguard_backend.schemas import RunPublic
from rlguard_frontend import ids, run_state, traces, url_state
from rlguard_frontend.api_client import ApiClient, ApiError, carry_token
from rlguard_frontend.components import alert_views, run_alerts, run_commands
from rlguard_frontend.controls import control_id, controls_bar
from rlguard_frontend.pages.run import callbacks as run_callbacks
from rlguard_frontend.pages.run import data as run_data
from rlguard_frontend.pages.run import keys as run_keys
from rlguard_frontend.panel_views import view_from
from rlguard_frontend.panels import PANELS, Panel
from rlguard_frontend.url_state import RunViewState

PREFIX = "run"
PANEL_MAX_POINTS = run_data.PANEL_MAX_POINTS
GRAPH_CONFIG: Any = {"displaylogo": False, "modeBarButtonsToRemove": ["lasso2d", "select2d"]}


def layout(
    run_id: str, client: ApiClient, theme: str | None = None, query: str | None = None
) -> html.Div:
    """The page with its first draw in it, as its URL's ``query`` says: one round trip."""
    view = RunViewState.from_query(query)
    try:
        first = initial_draw(client, run_id, theme, view)
    except ApiError as exc:  # the tick retries: refresh_run builds the panels once it can
        first = {"error": str(exc), "header": [], "plan": None, "cursor": None, "alerts": []}
        first["digest"] = alert_views.digest([])
        first["cards"], first["others"], first["steps"] = [], [], None
    zoom_reset = html.Div(
        [
            html.Span(
                run_callbacks.zoom_label(view.zoom), id=ids.RUN_ZOOM_LABEL, className="zoom-label"
            ),
            html.Button("reset zoom", id=ids.RUN_ZOOM_RESET, className="button-small"),
        ],
        className="control",
    )
    alerts = first["alerts"]
    return html.Div(
        [
            dcc.Store(id=ids.RUN_ID, data=run_id),
            dcc.Store(id=ids.RUN_PLAN, data=first["plan"]),
            dcc.Store(id=ids.RUN_CURSOR, data=first["cursor"]),
            # {} not None: a memory Store holding None sets it again on mount, and that redrew
            # every panel (~0.4 MB, ~1.5 s of a 200,000-step page) right after the first draw.
            dcc.Store(id=ids.RUN_ZOOM, data=view.zoom or {}),
            dcc.Store(id=ids.RUN_QUERY),
            dcc.Store(id=ids.RUN_ALERTS, data=first["digest"]),
            dcc.Store(id=ids.RUN_REDRAW, data=0),
            dcc.Store(id=ids.RUN_LIVE),
            dcc.Store(id=ids.RUN_PICKED, data=list(view.picked)),
            dcc.Store(id=ids.RUN_KEY_STEPS, data=first["steps"]),
            html.Div(first["header"], id=ids.RUN_HEADER, className="run-header"),
            run_commands.controls(client.can_write()),
            run_commands.history(),
            html.Div(first["error"], id=ids.RUN_ERROR, className="error"),
            controls_bar(
                PREFIX,
                live=True,
                extra=[zoom_reset],
                smoothing=view.smoothing,
                log=view.log,
                xmode=view.xmode,
            ),
            html.Div(
                [
                    html.Div(first["cards"], id=ids.RUN_PANELS, className="panels"),
                    html.Aside(
                        [
                            html.H3("Alerts"),
                            html.Div(
                                alert_views.timeline(alerts),
                                id=ids.RUN_TIMELINE,
                                className="timeline",
                            ),
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
                            html.H3("Other keys"),
                            dcc.Input(
                                id=ids.RUN_KEY_SEARCH,
                                value=view.keys,
                                placeholder="search keys…",
                                type="search",
                                className="search",
                            ),
                        ],
                        className="section-head",
                    ),
                    html.Div(first["others"], id=ids.RUN_OTHER_KEYS),
                ],
                className="other-keys",
            ),
        ],
        className="run-page",
    )


def initial_draw(
    client: ApiClient, run_id: str, theme: str | None, shown: RunViewState | None = None
) -> dict[str, Any]:
    """Header, plan, drawn cards, live cursor and alerts of a run, as the controls start."""
    shown = shown or RunViewState()
    smooth, xmode, zoom = shown.smoothing, shown.xmode, shown.zoom
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="rlguard-run") as pool:
        listed = pool.submit(carry_token(client.list_alerts), run_id)
        run = client.get_run(run_id)
        keys = client.list_keys(run_id).data
        plan = run_data.make_plan(client, run, None, keys)
        steps = run_data.key_steps(plan, keys)
        last = pool.submit(carry_token(run_data.last_values), client, run_id, steps)
        drawn_ids = run_data.panel_ids(plan, shown.picked)
        series = run_data.read_drawn_series(client, run_id, plan, smooth, zoom, drawn_ids, xmode)
        alerts, values = listed.result().data, last.result()
    log = ["log"] if shown.log else []
    view = view_from(smooth, log, xmode, theme, zoom, traces.start_time(series))
    drawn, cursor = run_data.draw(drawn_ids, plan, series, alerts, view, frozen=bool(zoom))
    figures = dict(zip(drawn_ids, drawn, strict=True))
    return {
        "error": "",
        "header": header(run),
        "plan": plan,
        "cursor": cursor,
        "alerts": alerts,
        "digest": alert_views.digest(alerts),
        "cards": panel_cards(plan, figures),
        "others": run_keys.other_keys(plan, values, shown.keys, list(shown.picked), figures),
        "steps": steps,
    }


def header(run: RunPublic) -> list[Any]:
    """The run page's title line: name, status (and what stopped it), links, headline config
    and tags."""
    status = run_state.display_status(run)
    chips = [html.Span(f"{k} = {v}", className="chip") for k, v in run_state.headline_config(run)]
    chips += [html.Span(tag, className="chip chip-tag") for tag in run.tags]
    title = [
        html.H2(run.name or run.id, className="run-title"),
        html.Span(status, id=ids.RUN_STATUS, className=f"badge status-{status}"),
    ]
    stopped_by = run_state.stopped_by(run)
    if stopped_by:
        title.append(html.Span(stopped_by, id=ids.RUN_STOPPED_BY, className="run-stopped-by"))
    links: list[Any] = [
        dcc.Link("compare…", href=f"/compare?runs={run.id}"),
        dcc.Link("samples…", href=f"/runs/{run.id}/samples", id=ids.RUN_SAMPLES_LINK),
    ]
    wandb_url = run_state.wandb_url(run)
    if wandb_url:
        links.append(
            html.A(
                "W&B run",
                href=wandb_url,
                id=ids.RUN_WANDB_LINK,
                target="_blank",
                rel="noopener noreferrer",
            )
        )
    return [
        html.Div(title, className="run-title-row"),
        html.Div(
            [
                html.Span(["project ", html.B(run.project)]),
                html.Span(["run ", html.Code(run.id)]),
                html.Span(["last step ", html.B(_step(run.last_step), id=ids.RUN_LAST_STEP)]),
                html.Span(f"updated {run_state.age(run.updated_at)}"),
                *links,
            ],
            className="run-meta",
        ),
        html.Div(chips, className="chips"),
    ]


def _step(step: int | None) -> str:
    return "—" if step is None else str(step)


def panel_cards(plan: dict[str, Any], drawn: dict[str, dict[str, Any]] | None = None) -> list[Any]:
    """Cards for the registry panels the run logs, then one line naming those it does not.

    ``drawn`` holds figures by panel id when the cards come already drawn. A panel whose keys
    arrive later is in the next plan: ``refresh_run`` rebuilds the cards then.
    """
    drawn = drawn or {}
    cards: list[Any] = []
    for panel in PANELS:
        if panel.id not in plan["panels"]:
            continue
        head = html.Div(
            [html.H4(panel.title), html.Span(panel.hint, className="hint")], className="card-head"
        )
        figure: dict[str, Any] = {"figure": drawn[panel.id]} if panel.id in drawn else {}
        graph = dcc.Graph(
            id=ids.panel_graph(panel.id), **figure, config=GRAPH_CONFIG, className="graph"
        )
        cards.append(html.Div([head, graph], className="card"))
    absent = [panel for panel in PANELS if panel.id not in plan["panels"]]
    return cards + ([absent_panels(absent)] if absent else [])


def absent_panels(absent: list[Panel]) -> html.P:
    """The panels a run logs nothing for, on one line; a name's tooltip says what it draws."""
    names: list[Any] = []
    for panel in absent:
        wanted = ", ".join(panel.signals + panel.right) or "system metrics"
        names += [", " if names else "", html.Span(panel.title, title=f"draws {wanted}")]
    return html.P(["Not logged by this run: ", *names], className="panels-absent")


def register(app: Dash, client: ApiClient) -> None:
    """Wire the run page's callbacks to ``app``."""
    smoothing, log, xaxis, live = (
        control_id(PREFIX, n) for n in (ids.SMOOTHING, ids.LOG, ids.XAXIS, ids.LIVE)
    )

    @app.callback(
        Output(ids.RUN_HEADER, "children"),
        Output(ids.RUN_ERROR, "children"),
        Output(ids.RUN_PLAN, "data"),
        Output(ids.RUN_PANELS, "children"),
        Output(ids.RUN_OTHER_KEYS, "children"),
        Output({"type": ids.KEY_VALUE, "panel": ALL}, "children"),
        Output(ids.RUN_KEY_STEPS, "data"),
        Input(ids.TICK, "n_intervals"),
        State(ids.RUN_ID, "data"),
        State(ids.RUN_PLAN, "data"),
        State(ids.RUN_KEY_STEPS, "data"),
        State(ids.RUN_KEY_SEARCH, "value"),
        State(ids.RUN_PICKED, "data"),
        prevent_initial_call=True,  # the layout came with all of it
    )
    def refresh_run(_tick, run_id, previous, steps, search, picked) -> tuple:
        def build(plan: dict[str, Any], values: dict[str, Any]) -> tuple[list[Any], list[Any]]:
            return panel_cards(plan), run_keys.other_keys(plan, values, search or "", picked or [])

        cells = [o["id"]["panel"] for o in ctx.outputs_list[5]]
        return run_callbacks.refresh_run(client, run_id, previous, steps, cells, build, header)

    @app.callback(
        Output({"type": ids.PANEL_GRAPH, "panel": ALL}, "figure"),
        Output(ids.RUN_CURSOR, "data"),
        Input(ids.RUN_PLAN, "data"),
        Input(smoothing, "value"),
        Input(log, "value"),
        Input(xaxis, "value"),
        Input(ids.RUN_ZOOM, "data"),
        Input(ids.THEME, "data"),
        Input(ids.RUN_REDRAW, "data"),
        State(ids.RUN_ID, "data"),
        prevent_initial_call=True,  # the layout came drawn
    )
    def draw_panels(plan, smooth, log_on, xmode, zoom, theme, _redraw, run_id) -> tuple:
        panel_ids = [o["id"]["panel"] for o in ctx.outputs_list[0]]
        controls = {"smoothing": smooth, "log": log_on, "xmode": xmode, "zoom": zoom}
        return run_callbacks.draw_panels(
            client, run_id, panel_ids, plan, {**controls, "theme": theme}
        )

    # Live points reach the graphs through a store and a browser-side step: it drops every point
    # at or before a trace's last x, so a tick answered after a redraw (or two ticks in flight
    # at once) can never draw a point twice.
    app.clientside_callback(
        ClientsideFunction(namespace="rlguard", function_name="appendNewPoints"),
        Output({"type": ids.PANEL_GRAPH, "panel": ALL}, "extendData"),
        Input(ids.RUN_LIVE, "data"),
        prevent_initial_call=True,
    )

    @app.callback(
        Output(ids.RUN_LIVE, "data"),
        Output(ids.RUN_CURSOR, "data", allow_duplicate=True),
        Output(ids.RUN_REDRAW, "data"),
        Input(ids.TICK, "n_intervals"),
        State(ids.RUN_CURSOR, "data"),
        State(live, "value"),
        State(smoothing, "value"),
        State(xaxis, "value"),
        State(ids.RUN_ID, "data"),
        State(ids.RUN_REDRAW, "data"),
        State({"type": ids.PANEL_GRAPH, "panel": ALL}, "id"),
        prevent_initial_call=True,
    )
    def extend_panels(_tick, state, live_on, smooth, xmode, run_id, redraw, graphs) -> tuple:
        controls = {"live": bool(live_on), "smoothing": smooth, "xmode": xmode}
        live, state, redraw_now = run_callbacks.extend_panels(
            client, run_id, state, graphs, controls
        )
        return {"tick": _tick, **live}, state, (redraw or 0) + 1 if redraw_now else no_update

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
        reset = ctx.triggered_id == ids.RUN_ZOOM_RESET
        return run_callbacks.shared_zoom(ctx.triggered[0]["value"], reset, xmode, current)

    @app.callback(
        Output(ids.RUN_QUERY, "data"),
        Input(smoothing, "value"),
        Input(log, "value"),
        Input(xaxis, "value"),
        Input(ids.RUN_ZOOM, "data"),
        Input(ids.RUN_KEY_SEARCH, "value"),
        Input(ids.RUN_PICKED, "data"),
        State(ids.THEME, "data"),  # carried into the link with the next change of view
        State(ids.URL, "search"),
        State(ids.RUN_ID, "data"),
        prevent_initial_call=True,
    )
    def keep_in_url(*values: Any) -> dict[str, str]:
        """Each change of view becomes a history entry: back/forward and copied links work."""
        if len(ctx.triggered) != 1:
            raise PreventUpdate  # the page was just built (from this URL): nothing changed
        shown = run_callbacks.view_state(*values[:-2])
        return url_state.url_for(shown, values[-2], f"/runs/{values[-1]}")

    url_state.push_to_url(app, ids.RUN_QUERY)

    run_keys.register(app, client, {"smoothing": smoothing, "log": log, "xaxis": xaxis})

    run_alerts.register(app, client, xaxis)
    run_commands.register(app, client)
