"""Assembling a run's panels: a plan plus series and alerts → figures, and live extensions.

Pure functions over wire models; the run page's callbacks fetch, call these and return.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from rlguard_backend.schemas import AlertPublic, SeriesData, start_level
from rlguard_frontend import figures, traces
from rlguard_frontend.panels import CONTROLLED_KL_SIGNALS, PANELS_BY_ID, panels_for_alert

MINI_HEIGHT = 170


def alerts_by_panel(
    alerts: Sequence[AlertPublic], plan: Mapping[str, Any]
) -> dict[str, list[AlertPublic]]:
    """The alerts each panel of the plan draws, by panel id."""
    by_panel: dict[str, list[AlertPublic]] = {}
    for alert in alerts:
        for panel_id in panels_for_alert(alert.detector, alert.evidence, plan):
            by_panel.setdefault(panel_id, []).append(alert)
    return by_panel


def guides(panel_id: str, plan: Mapping[str, Any]) -> list[figures.Guide]:
    """The reference lines a panel declares, where the run provides their values."""
    out: list[figures.Guide] = []
    target, start = plan.get("kl_target"), plan.get("entropy_start")
    entry = plan["panels"].get(panel_id, {"keys": [], "right": []})
    signals = {plan.get("signals", {}).get(k) for k in entry["keys"] + entry["right"]}
    if not signals & {*CONTROLLED_KL_SIGNALS, "kl_loss"}:
        target = None  # the controller's target is about KL to the reference, not ppo_kl
    for guide in PANELS_BY_ID[panel_id].guides:
        if guide in ("kl_target", "kl_target_right") and target is not None:
            out.append(figures.Guide(target, f"target {target:g}", right=guide.endswith("right")))
        elif guide == "entropy_start" and start is not None:
            out.append(figures.Guide(start, f"start {start:.3g}"))
        elif guide == "entropy_half" and start is not None:
            out.append(figures.Guide(start / 2, "50 % of start"))
    return out


def build_figures(
    panel_ids: Sequence[str],
    plan: Mapping[str, Any],
    series: Mapping[str, SeriesData],
    alerts: Sequence[AlertPublic],
    view: figures.View,
) -> list[dict[str, Any]]:
    """One figure per requested id: registry panels and ``k<n>`` mini charts."""
    concerned = alerts_by_panel(alerts, plan)
    empty = SeriesData.model_construct(steps=[], values=[], times=[], last_step=None)
    result = []
    for panel_id in panel_ids:
        if panel_id in PANELS_BY_ID:
            entry = plan["panels"].get(panel_id, {"keys": [], "right": []})
            panel = PANELS_BY_ID[panel_id]
            lines = [figures.Line(k, series.get(k, empty)) for k in entry["keys"]]
            lines += [figures.Line(k, series.get(k, empty), right=True) for k in entry["right"]]
            content = figures.PanelContent(
                lines=lines,
                unit=panel.unit,
                right_unit=panel.right_unit,
                guides=guides(panel_id, plan),
                alerts=concerned.get(panel_id, []),
                alert_slot=True,
                markers=plan.get("markers", ()),
                run_alerts=alerts,
            )
        else:
            key = plan["minis"].get(panel_id, "")
            content = figures.PanelContent(
                lines=[figures.Line(key, series.get(key, empty))],
                alerts=concerned.get(panel_id, []),
                height=MINI_HEIGHT,
                show_legend=False,
                alert_slot=True,
                markers=plan.get("markers", ()),
                run_alerts=alerts,
            )
        result.append(figures.panel_figure(content, view))
    return result


def alert_overlays(
    panel_ids: Sequence[str],
    plan: Mapping[str, Any],
    alerts: Sequence[AlertPublic],
    anchors: Mapping[str, SeriesData],
    view: figures.View,
) -> list[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """Per panel: its shapes and alert trace, to patch into a drawn figure in place.

    ``anchors`` maps a panel's first key to its series (only read off the step axis).
    """
    concerned = alerts_by_panel(alerts, plan)
    empty = SeriesData.model_construct(steps=[], values=[], times=[], last_step=None)
    out = []
    for panel_id in panel_ids:
        first = first_key(panel_id, plan)
        marks = concerned.get(panel_id, [])
        panel_guides = guides(panel_id, plan) if panel_id in PANELS_BY_ID else []
        anchor = anchors.get(first, empty)
        markers = plan.get("markers", ())
        out.append(figures.alert_overlay(panel_guides, marks, anchor, view, markers, alerts))
    return out


def first_key(panel_id: str, plan: Mapping[str, Any]) -> str:
    """The key whose points place a panel's alert ranges (its first line)."""
    if panel_id in PANELS_BY_ID:
        entry = plan["panels"].get(panel_id, {"keys": [], "right": []})
        return next(iter(entry["keys"] + entry["right"]), "")
    return str(plan["minis"].get(panel_id, ""))


def entropy_start(series: SeriesData | None) -> float | None:
    """The run's starting entropy as its alerts' ``entropy_start`` says it (``start_level``),
    from the series of its first ``START_SPAN_STEPS`` steps."""
    if series is None:
        return None
    return start_level(series.steps, traces.decode(series.values))


def extension(
    trace_map: Mapping[str, Mapping[str, int]],
    cursor: Mapping[str, int],
    smoothed_last: Mapping[str, float | None],
    series: Mapping[str, SeriesData],
    view: figures.View,
) -> tuple[Any, dict[str, int], dict[str, float | None], int]:
    """``extendData`` for one figure from live points past each key's cursor.

    Returns (payload or None, new cursors, new smoothed tails, points appended).
    """
    xs: list[list[Any]] = []
    ys: list[list[Any]] = []
    indices: list[int] = []
    new_cursor: dict[str, int] = {}
    new_tail: dict[str, float | None] = {}
    appended = 0
    for key, roles in trace_map.items():
        data = series.get(key)
        if data is None:
            continue
        fresh = [i for i, step in enumerate(data.steps) if step > cursor.get(key, -1)]
        if not fresh:
            continue
        steps = [data.steps[i] for i in fresh]
        times = [data.times[i] for i in fresh] if data.times else None
        values = traces.decode([data.values[i] for i in fresh])
        x = traces.x_values(steps, times, view.xmode, view.t0)
        xs.append(x)
        ys.append(values)
        indices.append(roles["raw"])
        if "smooth" in roles:
            tail = traces.continue_ema(smoothed_last.get(key), values, view.smoothing)
            xs.append(x)
            ys.append(tail)
            indices.append(roles["smooth"])
            last = next((v for v in reversed(tail) if v is not None), None)
            new_tail[key] = last if last is not None else smoothed_last.get(key)
        new_cursor[key] = steps[-1]
        appended = max(appended, len(steps))
    if not indices:
        return None, new_cursor, new_tail, 0
    return [{"x": xs, "y": ys}, indices], new_cursor, new_tail, appended


def smoothed_tails(series: Mapping[str, SeriesData]) -> dict[str, float | None]:
    """The last finite smoothed value of each key: where a live EMA continues from."""
    tails: dict[str, float | None] = {}
    for key, data in series.items():
        values = traces.decode(data.smoothed) if data.smoothed else []
        tails[key] = next((v for v in reversed(values) if v is not None and math.isfinite(v)), None)
    return tails


def view_from(
    smoothing: float | None,
    log: list[str] | None,
    xmode: str | None,
    theme: str | None,
    zoom: dict[str, int] | None,
    t0: float | None = None,
) -> figures.View:
    """The figure view the controls ask for (uirevision keeps zoom across redraws)."""
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
