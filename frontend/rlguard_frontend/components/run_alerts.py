"""The run page's alerts: the timeline and figure overlays kept current, detail, actions.

Registered by ``run_detail.register``; the components live in ``run_detail.layout``.
"""

from __future__ import annotations

from typing import Any

from dash import ALL, Dash, Input, Output, Patch, State, ctx, no_update
from dash.exceptions import PreventUpdate

from rlguard_backend.schemas import AlertPublic, SeriesData
from rlguard_frontend import ids, panel_views
from rlguard_frontend.api_client import ApiClient, ApiError
from rlguard_frontend.components import alert_views
from rlguard_frontend.pages.run import data as run_data


def alert_patches(
    client: ApiClient,
    run_id: str,
    panel_ids: list[str],
    plan: dict[str, Any] | None,
    state: dict[str, Any] | None,
    alerts: list[AlertPublic],
    xmode: str | None,
) -> list[Any]:
    """New alert shapes and markers patched into each drawn figure (lines are not resent)."""
    if not plan or not state:
        return [no_update] * len(panel_ids)
    view = panel_views.view_from(0, None, xmode, None, None, state["t0"])
    anchors: dict[str, SeriesData] = {}
    if view.xmode != "step":  # ranges are placed by the drawn points' wall times
        keys = sorted({panel_views.first_key(p, plan) for p in panel_ids} - {""})
        anchors = client.read_series(run_id, keys, max_points=run_data.PANEL_MAX_POINTS).series
    overlays = panel_views.alert_overlays(panel_ids, plan, alerts, anchors, view)
    patches: list[Any] = []
    for panel_id, (shapes, marker_trace) in zip(panel_ids, overlays, strict=True):
        lines = state["traces"].get(panel_id)
        if not lines:  # not drawn yet, or drawn without lines: the next redraw shows them
            patches.append(no_update)
            continue
        patch = Patch()
        patch["layout"]["shapes"] = shapes
        patch["data"][sum(len(roles) for roles in lines.values())] = marker_trace
        patches.append(patch)
    return patches


def register(app: Dash, client: ApiClient, xaxis: str) -> None:
    """The alert callbacks; ``xaxis`` is the id of the run page's x-axis control."""

    @app.callback(
        Output(ids.RUN_ALERTS, "data"),
        Output(ids.RUN_TIMELINE, "children"),
        Output({"type": ids.PANEL_GRAPH, "panel": ALL}, "figure", allow_duplicate=True),
        Input(ids.TICK, "n_intervals"),
        State(ids.RUN_ID, "data"),
        State(ids.RUN_ALERTS, "data"),
        State(ids.RUN_PLAN, "data"),
        State(ids.RUN_CURSOR, "data"),
        State(xaxis, "value"),
        prevent_initial_call=True,  # the layout came with the alerts drawn
    )
    def refresh_alerts(_tick, run_id, previous, plan, state, xmode) -> tuple:
        try:
            alerts = client.list_alerts(run_id).data
        except ApiError:
            raise PreventUpdate from None
        digest = alert_views.digest(alerts)
        if digest == previous:
            raise PreventUpdate
        panel_ids = [o["id"]["panel"] for o in ctx.outputs_list[2]]
        try:
            patches = alert_patches(client, run_id, panel_ids, plan, state, alerts, xmode)
        except ApiError:
            raise PreventUpdate from None
        return digest, alert_views.timeline(alerts), patches

    @app.callback(
        Output(ids.RUN_ALERT_DETAIL, "children"),
        Input({"type": ids.ALERT_ITEM, "alert": ALL}, "n_clicks"),
        Input({"type": ids.PANEL_GRAPH, "panel": ALL}, "clickData"),
        State(ids.RUN_ID, "data"),
        prevent_initial_call=True,
    )
    def show_alert(_clicks, _graph_clicks, run_id) -> Any:
        trigger = ctx.triggered_id
        if not isinstance(trigger, dict) or not ctx.triggered[0]["value"]:
            raise PreventUpdate
        if trigger["type"] == ids.ALERT_ITEM:
            wanted = trigger["alert"]
        else:
            point = ctx.triggered[0]["value"]["points"][0]
            wanted = point.get("customdata")
        try:
            alerts = client.list_alerts(run_id).data
        except ApiError:
            raise PreventUpdate from None
        chosen = next((a for a in alerts if a.id == wanted), None)
        if chosen is None:
            raise PreventUpdate
        return alert_views.alert_detail(chosen, client.can_write())

    @app.callback(
        Output(ids.RUN_ALERT_DETAIL, "children", allow_duplicate=True),
        Output(ids.RUN_ERROR, "children", allow_duplicate=True),
        Input({"type": ids.ALERT_ACTION, "alert": ALL, "action": ALL}, "n_clicks"),
        prevent_initial_call=True,
    )
    def act_on_alert(_clicks: list[int | None]) -> tuple:
        trigger = ctx.triggered_id
        if not isinstance(trigger, dict) or not ctx.triggered[0]["value"]:
            raise PreventUpdate
        try:
            change = alert_views.ACTIONS[trigger["action"]]
            changed = client.update_alert(int(trigger["alert"]), change)
        except ApiError as exc:
            return no_update, alert_views.action_failed(exc)
        # It could write, so it can; the next tick redraws the timeline.
        return alert_views.alert_detail(changed, writable=True), ""
