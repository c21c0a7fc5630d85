"""Vertical markers across every chart of a run, and y axes that stay readable.

Markers: restarts, rewinds, learning-rate changes, stop and checkpoint commands
(``GET /runs/{id}/markers``, kept in the page's plan) as dashed lines labelled at the top;
the run's alerts as thin lines in their severity's colour, merged where closer than about a
pixel.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

from rlguard_backend.schemas import AlertPublic, SeriesData
from rlguard_frontend import traces

MARKER_COLOURS = {
    "restart": "#7f8790",
    "rewind": "#7f8790",
    "lr_change": "#CC79A7",
    "stop": "#D55E00",
    "checkpoint": "#0072B2",
}
MARKER_TEXT = {
    "restart": "restart",
    "rewind": "rewind",
    "lr_change": "lr",
    "stop": "stop",
    "checkpoint": "ckpt",
}
SEVERITY_COLOURS = {"critical": "#D55E00", "warn": "#E69F00", "info": "#56B4E9"}
MERGE_BUCKETS = 500  # alert ranges closer than 1/500 of the drawn steps: one
# Alert lines closer than 1/100 of the drawn steps: one (the worst kept). Plotly draws each
# line as its own element on every chart: a 200,000-step run's 1,000 alerts drew 155 a chart.
ALERT_LINE_BUCKETS = 100
FLAT_SPAN = 1e-9  # lines varying less than this (relative) are drawn as flat
FLAT_PAD = 0.5  # … around their value ± half of it


def marker_overlay(
    markers: Sequence[Mapping[str, Any]],
    alerts: Sequence[AlertPublic],
    anchor: SeriesData,
    view: Any,
    colour: str | None = None,
    who: str | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(shapes, annotations) of a run's markers and alert lines on one chart.

    ``colour``: every line in it (the run's, where several runs share a chart) instead of the
    kind's or severity's; ``who``: the run's name, before each marker's hover text.
    """
    shapes: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    for marker in markers:
        x = traces.step_to_x(marker["step"], anchor.steps, anchor.times, view.xmode, view.t0)
        if x is None:
            continue
        shade = colour or MARKER_COLOURS.get(marker["kind"], "#7f8790")
        shapes.append(_vertical(x, shade, "dash", 1.2))
        label = MARKER_TEXT.get(marker["kind"], marker["kind"])
        notes.append(_label(x, label, marker, shade, who))
    for step, severity in alert_steps(alerts, anchor.steps):
        x = traces.step_to_x(step, anchor.steps, anchor.times, view.xmode, view.t0)
        if x is not None:
            shade = colour or SEVERITY_COLOURS.get(severity, "#999999")
            shapes.append(_vertical(x, shade, "dot", 1))
    return shapes, notes


def alert_steps(alerts: Sequence[AlertPublic], steps: Sequence[int]) -> list[tuple[int, str]]:
    """Each alert's first step with its severity; one per 1 % of the steps, the worst kept."""
    gap = (steps[-1] - steps[0]) / ALERT_LINE_BUCKETS if len(steps) > 1 else 0
    rank = {"critical": 0, "warn": 1, "info": 2}
    kept: list[tuple[int, str]] = []
    for alert in sorted(alerts, key=lambda a: (a.first_step, rank.get(a.severity, 3))):
        if kept and alert.first_step - kept[-1][0] <= gap:
            continue
        kept.append((alert.first_step, alert.severity))
    return kept


def flat_range(values: Sequence[float | None]) -> list[float] | None:
    """An explicit y range for a (near) constant line: Plotly's own gives ticks like
    0.0030000001 that no margin fits. None when the line varies."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return None
    low, high = min(finite), max(finite)
    scale = max(abs(low), abs(high))
    if high - low > FLAT_SPAN * max(scale, 1e-300):
        return None
    pad = FLAT_PAD * scale if scale > 0 else 1.0
    return [low - pad, high + pad]


def _vertical(x: Any, colour: str, dash: str, width: float) -> dict[str, Any]:
    return {
        "type": "line",
        "xref": "x",
        "x0": x,
        "x1": x,
        "yref": "paper",
        "y0": 0,
        "y1": 1,
        "layer": "below",
        "line": {"color": colour, "width": width, "dash": dash},
    }


def _label(
    x: Any, text: str, marker: Mapping[str, Any], colour: str, who: str | None
) -> dict[str, Any]:
    hover = f"{marker['label']} (step {marker['step']})"
    return {
        "text": text,
        "hovertext": f"{html.escape(who, quote=False)}: {hover}" if who else hover,
        "xref": "x",
        "x": x,
        "xanchor": "left",
        "yref": "paper",
        "y": 1,
        "yanchor": "top",
        "showarrow": False,
        "font": {"size": 9, "color": colour},
    }
