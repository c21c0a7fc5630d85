"""What the run page's callbacks do, as plain functions of their inputs and the API client.

``page.register`` and ``keys.register`` wire them to Dash; a test calls them directly. Each raises
``PreventUpdate`` where the page should stay as it is.
"""

from __future__ import annotations

import math
from typing import Any

from dash import no_update
from dash.exceptions import PreventUpdate

from rlguard_frontend import figures, panel_views, traces
from rlguard_frontend.api_client import ApiClient, ApiError
from rlguard_frontend.pages.run import data as run_data
from rlguard_frontend.panel_views import view_from
from rlguard_frontend.url_state import RunViewState

LIVE_REDRAW_AFTER_POINTS = 1000  # then refetch downsampled history: traces stay ~2,000 points


def refresh_run(
    client: ApiClient,
    run_id: str,
    previous: dict[str, Any] | None,
    shown_steps: dict[str, int | None] | None,
    value_ids: list[str],
    build: Any,
    header: Any,
) -> tuple:
    """(header, error, plan, cards, other keys, value cells, key steps) for this tick.

    The header always; the plan and the page's parts when the plan moved (``build(plan,
    values)`` makes them), else the last values of the listed keys that moved since
    ``shown_steps`` into their cells (``value_ids``: the ``k<n>`` of each cell).
    """
    try:
        run = client.get_run(run_id)
        keys = client.list_keys(run_id).data
        plan = run_data.make_plan(client, run, previous, keys)
        steps = run_data.key_steps(plan, keys)
        rebuilt = not previous or any(plan[k] != previous[k] for k in ("panels", "minis"))
        shown = {} if rebuilt else (shown_steps or {})
        changed = {name: step for name, step in steps.items() if step != shown.get(name)}
        values = run_data.last_values(client, run_id, changed)
    except ApiError as exc:
        return no_update, str(exc), *[no_update] * 5
    new_steps = steps if changed or rebuilt else no_update
    if rebuilt:  # drawn by draw_panels, which the new plan triggers
        cards, others = build(plan, values)
        return header(run), "", plan, cards, others, [no_update] * len(value_ids), new_steps
    names = plan["minis"]
    cells = [
        run_data.value_text(values[names[v]]) if names.get(v) in values else no_update
        for v in value_ids
    ]
    plan_now = no_update if plan == previous else plan  # a guide or marker moved: redraw
    return header(run), "", plan_now, no_update, no_update, cells, new_steps


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
    """A listed key's style: hidden when its name does not contain the search."""
    return {} if (search or "").strip().lower() in name.lower() else {"display": "none"}


def key_count(names: list[str], search: str | None) -> str:
    """How many keys the list shows: ``"120 keys"``, or ``"3 of 120 keys"`` under a search."""
    shown = sum(1 for name in names if not key_style(name, search))
    return f"{len(names)} keys" if shown == len(names) else f"{shown} of {len(names)} keys"


def toggled(picked: list[str] | None, name: str) -> list[str]:
    """The picked keys after a click on ``name``: added at the end, or taken out."""
    picked = list(picked or [])
    return [n for n in picked if n != name] if name in picked else [*picked, name]


def draw_picked(
    client: ApiClient,
    run_id: str,
    mini: str,
    plan: dict[str, Any],
    state: dict[str, Any],
    controls: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(figure, live cursor with it) of a key just picked, drawn as the controls say."""
    smooth, zoom, xmode = controls.get("smoothing"), controls.get("zoom"), controls.get("xmode")
    try:
        series = run_data.read_drawn_series(
            client, run_id, plan, float(smooth or 0), zoom, [mini], xmode
        )
        alerts = client.list_alerts(run_id).data
    except ApiError:
        raise PreventUpdate from None
    view = view_from(smooth, controls.get("log"), xmode, controls.get("theme"), zoom, state["t0"])
    (figure,), part = run_data.draw([mini], plan, series, alerts, view, frozen=bool(zoom))
    merged = {**state, **{f: {**state[f], **part[f]} for f in ("cursor", "traces", "tails")}}
    return figure, merged


def without_chart(state: dict[str, Any], mini: str) -> dict[str, Any]:
    """The live cursor once a picked chart is gone: its keys are read no more (unless drawn
    elsewhere)."""
    charts = {p: t for p, t in state["traces"].items() if p != mini}
    drawn = {key for trace_map in charts.values() for key in trace_map}
    cursor = {k: v for k, v in state["cursor"].items() if k in drawn}
    tails = {k: v for k, v in state["tails"].items() if k in drawn}
    return {**state, "traces": charts, "cursor": cursor, "tails": tails}


def sparkline_source(client: ApiClient, run_id: str, name: str) -> str:
    """A key's sparkline (an SVG data URI) over the whole run; ``""`` without points."""
    try:
        answer = client.read_series(run_id, [name], max_points=run_data.SPARK_POINTS, times=False)
    except ApiError:
        raise PreventUpdate from None
    data = answer.series.get(name)
    return figures.sparkline(data.steps, data.values) if data else ""


def view_state(
    smooth: float | None,
    log: list[str] | None,
    xmode: str | None,
    zoom: dict[str, int] | None,
    keys: str | None,
    picked: list[str] | None,
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
        picked=tuple(picked or ()),
    ).to_query()
    return RunViewState.from_query(query)
