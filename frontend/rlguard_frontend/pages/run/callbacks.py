"""What the run page's callbacks do, as plain functions of their inputs and the API client.

``pages/run_detail.register`` wires them to Dash; a test calls them directly. Each raises
``PreventUpdate`` where the page should stay as it is.
"""

from __future__ import annotations

import math
from typing import Any

from dash import no_update
from dash.exceptions import PreventUpdate

from rlguard_frontend import panel_views, traces
from rlguard_frontend.api_client import ApiClient, ApiError
from rlguard_frontend.pages.run import data as run_data
from rlguard_frontend.panel_views import view_from
from rlguard_frontend.url_state import RunViewState

LIVE_REDRAW_AFTER_POINTS = 1500  # then refetch downsampled history: traces stay ~2,000 points


def refresh_run(
    client: ApiClient, run_id: str, previous: dict[str, Any] | None, cards_for: Any, header: Any
) -> tuple:
    """(header, error, plan, cards, minis): the header always, the rest when the plan moved.

    ``cards_for(plan)`` and ``header(run)`` build the page's parts (``run_detail``).
    """
    try:
        run = client.get_run(run_id)
        plan = run_data.make_plan(client, run, previous)
    except ApiError as exc:
        return no_update, str(exc), no_update, no_update, no_update
    if plan == previous:
        return header(run), "", no_update, no_update, no_update
    if previous and all(plan[k] == previous[k] for k in ("panels", "minis")):
        return header(run), "", plan, no_update, no_update  # a guide or marker moved: redraw
    cards, minis = cards_for(plan)  # drawn by draw_panels, which the new plan triggers
    return header(run), "", plan, cards, minis


def draw_panels(
    client: ApiClient,
    run_id: str,
    panel_ids: list[str],
    plan: dict[str, Any] | None,
    controls: dict[str, Any],
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every drawn graph's figure and the live cursor, for the controls
    (``smoothing``, ``log``, ``xmode``, ``zoom``, ``theme``)."""
    if not plan or not panel_ids:
        raise PreventUpdate
    smooth, zoom, xmode = controls.get("smoothing"), controls.get("zoom"), controls.get("xmode")
    try:
        series = run_data.read_drawn_series(
            client, run_id, plan, float(smooth or 0), zoom, panel_ids, xmode
        )
        alerts = client.list_alerts(run_id).data
    except ApiError:
        raise PreventUpdate from None
    view = view_from(
        smooth, controls.get("log"), xmode, controls.get("theme"), zoom, traces.start_time(series)
    )
    return run_data.draw(panel_ids, plan, series, alerts, view, frozen=bool(zoom))


def extend_panels(
    client: ApiClient,
    run_id: str,
    state: dict[str, Any] | None,
    graphs: list[dict[str, str]],
    controls: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """(live payloads, new cursor state, whether to redraw) for the points past the cursor."""
    if not state or not controls.get("live") or state["frozen"] or not state["cursor"]:
        raise PreventUpdate
    cursor: dict[str, int] = state["cursor"]
    xmode = controls.get("xmode")
    try:
        answer = client.read_series(
            run_id,
            list(cursor),
            after_step=min(cursor.values()),
            max_points=run_data.PANEL_MAX_POINTS,
            times=run_data.needs_times(xmode),
        )
    except ApiError:
        raise PreventUpdate from None
    view = view_from(controls.get("smoothing"), None, xmode, None, None, state["t0"])
    payloads, appended = [], 0
    for graph in graphs:  # the order the browser-side step receives them in
        trace_map = state["traces"].get(graph["panel"], {})
        payload, moved, tails, count = panel_views.extension(
            trace_map, cursor, state["tails"], answer.series, view
        )
        cursor = {**cursor, **moved}
        state["tails"].update(tails)
        appended = max(appended, count)
        payloads.append(payload)
    if appended == 0:
        raise PreventUpdate
    state = {**state, "cursor": cursor, "appended": state["appended"] + appended}
    return {"payloads": payloads}, state, state["appended"] > LIVE_REDRAW_AFTER_POINTS


def shared_zoom(
    event: Any, reset: bool, xmode: str | None, current: dict[str, int] | None
) -> tuple[Any, Any]:
    """(zoom, label) after a graph's relayout ``event`` or a click on reset."""
    if reset:
        return None, "all steps"
    event = event or {}
    if xmode != "step" or not isinstance(event, dict):
        raise PreventUpdate
    if event.get("xaxis.autorange"):
        return (None, "all steps") if current else (no_update, no_update)
    if "xaxis.range[0]" not in event:
        raise PreventUpdate
    lo = max(0, math.floor(float(event["xaxis.range[0]"])))
    hi = math.ceil(float(event["xaxis.range[1]"]))
    zoom = {"from": lo, "to": max(hi, lo)}
    return (no_update, no_update) if zoom == current else (zoom, zoom_label(zoom))


def zoom_label(zoom: dict[str, int] | None) -> str:
    """``"all steps"``, or the zoomed step range."""
    return f"steps {zoom['from']}–{zoom['to']}" if zoom else "all steps"


def key_style(name: str, search: str | None) -> dict[str, str]:
    """A mini chart's style: hidden when its key does not contain the search."""
    return {} if (search or "").strip().lower() in name.lower() else {"display": "none"}


def searched_minis(plan: dict[str, Any], search: str) -> list[str]:
    """The mini charts a key search shows (none without one), drawn with the page."""
    wanted = search.strip().lower()
    first = run_data.panel_ids(plan)
    minis = plan["minis"].items()
    return [m for m, name in minis if wanted and wanted in name.lower() and m not in first]


def view_state(
    smooth: float | None,
    log: list[str] | None,
    xmode: str | None,
    zoom: dict[str, int] | None,
    keys: str | None,
    theme: str | None,
) -> RunViewState:
    """The run page's controls as one state (what the URL holds), cleaned up as a URL is."""
    zoom = zoom or {}
    query = RunViewState(
        smoothing=float(smooth or 0),
        xmode=xmode or "step",
        log=bool(log),
        from_step=zoom.get("from"),
        to_step=zoom.get("to"),
        keys=(keys or "").strip(),
        theme=theme,
    ).to_query()
    return RunViewState.from_query(query)
