"""Pure figure builders: series in, Plotly figure dicts out (no Dash, no HTTP).

Every trace carries ``meta = {"key": ..., "role": "raw" | "smooth"}`` so the live callback can
find the trace a new point belongs to; alert markers come last so those indices stay stable.
The browser draws with the plotly.js bundle the ``plotly`` package ships (``plotly_bundle``).
"""

from __future__ import annotations

import html
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlguard_backend.schemas import AlertPublic, SeriesData
from rlguard_frontend import traces
from rlguard_frontend.chart_markers import (
    MERGE_BUCKETS,
    SEVERITY_COLOURS,
    flat_range,
    marker_overlay,
)

# Okabe & Ito (2008), colour-blind safe; black is swapped for grey on dark backgrounds.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
DARK_PALETTE = (*PALETTE[:-1], "#BBBBBB")
THEMES = {
    "light": {"paper": "#ffffff", "plot": "#ffffff", "font": "#1f2328", "grid": "#e6e8eb"},
    "dark": {"paper": "#161b22", "plot": "#161b22", "font": "#d0d7de", "grid": "#2d333b"},
}
RAW_OPACITY_SMOOTHED = 0.25
SPARK_WIDTH, SPARK_HEIGHT = 120, 24  # px: one row of the other keys' list
ALERT_AXIS = "y3"
GUIDE_COLOUR = "#7f8790"


@dataclass(frozen=True)
class View:
    """How every panel is drawn: the controls of the page."""

    xmode: str = "step"
    log: bool = False
    smoothing: float = 0.0
    theme: str = "light"
    t0: float | None = None
    x_range: tuple[Any, Any] | None = None
    uirevision: str = ""


@dataclass(frozen=True)
class Line:
    """One key drawn on a panel, on its left or right axis."""

    key: str
    series: SeriesData
    right: bool = False
    label: str | None = None
    t0: float | None = None  # this line's own zero of relative time (compare: each run's start)


@dataclass(frozen=True)
class Guide:
    """A horizontal reference line (target, starting level …)."""

    value: float
    label: str
    right: bool = False


@dataclass(frozen=True)
class PanelContent:
    lines: Sequence[Line]
    unit: str = ""
    right_unit: str = ""
    guides: Sequence[Guide] = field(default_factory=tuple)
    alerts: Sequence[AlertPublic] = field(default_factory=tuple)
    height: int = 280
    show_legend: bool = True
    alert_slot: bool = False  # always end with the (maybe empty) alert trace: patchable in place
    markers: Sequence[Mapping[str, Any]] = field(default_factory=tuple)  # restarts, rewinds, lr
    run_alerts: Sequence[AlertPublic] = field(default_factory=tuple)  # lines on every chart


def text(value: str) -> str:
    """Plotly renders a subset of HTML in labels; escape so names show as typed."""
    return html.escape(value, quote=False)


def palette(theme: str) -> tuple[str, ...]:
    """The trace colours of a theme."""
    return DARK_PALETTE if theme == "dark" else PALETTE


def panel_figure(content: PanelContent, view: View) -> dict[str, Any]:
    """One stability panel: raw (and smoothed) lines, guides, alert ranges and markers.

    Built as a plain Plotly figure dict: ``go.Figure`` validation costs ~40 ms a panel.
    """
    colours = palette(view.theme)
    data: list[dict[str, Any]] = []
    for index, line in enumerate(content.lines):
        data += _line_traces(line, colours[index % len(colours)], view)
    shapes: list[dict[str, Any]] = []
    annotations = [_guide(guide, shapes) for guide in content.guides]
    if content.lines:
        marks, notes = marker_overlay(
            content.markers, content.run_alerts, content.lines[0].series, view
        )
        shapes += marks
        annotations += notes
    if (content.alerts or content.alert_slot) and content.lines:
        data.append(_alert_markers(content.alerts, content.lines[0].series, view, shapes))
    layout = base_layout(view, content, has_right=any(line.right for line in content.lines))
    if not any(line.series.steps for line in content.lines):
        annotations.append(note("no points in this step range"))
    elif not view.log:
        flat = flat_range(
            [
                v
                for line in content.lines
                if not line.right
                for v in traces.decode(line.series.values)
            ]
        )
        if flat is not None:
            layout["yaxis"]["range"] = flat
    layout["shapes"], layout["annotations"] = shapes, annotations
    return {"data": data, "layout": layout}


def _line_traces(line: Line, colour: str, view: View) -> list[dict[str, Any]]:
    series = line.series
    x = traces.x_values(series.steps, series.times, view.xmode, line.t0 or view.t0)
    smoothed = series.smoothed is not None and view.smoothing > 0
    common = {
        "type": "scatter",
        "mode": "lines",
        "x": x,
        "name": text(line.label or line.key),
        "legendgroup": line.key,
        "yaxis": "y2" if line.right else "y",
    }
    dash = "dot" if line.right else "solid"
    raw = {
        **common,
        "y": traces.drawn(series.values),
        "showlegend": not smoothed,
        "opacity": RAW_OPACITY_SMOOTHED if smoothed else 1.0,
        "line": {"color": colour, "width": 1.2, "dash": dash},
        "meta": {"key": line.key, "role": "raw"},
        "hovertemplate": "%{y:.4g}",
    }
    if not smoothed:
        return [raw]
    smooth = {
        **common,
        "y": traces.drawn(series.smoothed),
        "line": {"color": colour, "width": 2, "dash": dash},
        "meta": {"key": line.key, "role": "smooth"},
        "hovertemplate": "%{y:.4g} (smoothed)",
    }
    return [raw, smooth]


def _guide(guide: Guide, shapes: list[dict[str, Any]]) -> dict[str, Any]:
    yref = "y2" if guide.right else "y"
    shapes.append(
        {
            "type": "line",
            "xref": "x domain",
            "x0": 0,
            "x1": 1,
            "yref": yref,
            "y0": guide.value,
            "y1": guide.value,
            "line": {"dash": "dash", "width": 1, "color": GUIDE_COLOUR},
        }
    )
    return {
        "text": text(guide.label),
        "xref": "x domain",
        "x": 0,
        "xanchor": "left",
        "yref": yref,
        "y": guide.value,
        "yanchor": "bottom",
        "showarrow": False,
        "font": {"size": 10, "color": GUIDE_COLOUR},
    }


def alert_overlay(
    guides: Sequence[Guide],
    alerts: Sequence[AlertPublic],
    anchor: SeriesData,
    view: View,
    markers: Sequence[Mapping[str, Any]] = (),
    run_alerts: Sequence[AlertPublic] = (),
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The shapes (guides, markers, then alert ranges) and the alert trace ``panel_figure``
    would draw."""
    shapes: list[dict[str, Any]] = []
    for guide in guides:
        _guide(guide, shapes)
    shapes += marker_overlay(markers, run_alerts, anchor, view)[0]
    return shapes, _alert_markers(alerts, anchor, view, shapes)


def step_span(alert: AlertPublic) -> str:
    """The steps an alert covers; an open one lasts to the newest step, not its last refresh."""
    if alert.status == "open":
        return f"since step {alert.first_step}"
    return f"steps {alert.first_step}–{alert.last_step}"


def _alert_markers(
    alerts: Sequence[AlertPublic], anchor: SeriesData, view: View, shapes: list[dict[str, Any]]
) -> dict[str, Any]:
    xs, colours, ids, hovers = [], [], [], []
    for alert in alerts:
        x0 = traces.step_to_x(alert.first_step, anchor.steps, anchor.times, view.xmode, view.t0)
        if x0 is None:
            continue
        colours.append(SEVERITY_COLOURS.get(alert.severity, "#999999"))
        xs.append(x0)
        ids.append(alert.id)
        span = step_span(alert)
        hovers.append(text(f"{alert.severity}: {alert.detector} ({span}) — click for details"))
    if xs:
        shapes += [_alert_shape(r, anchor, view) for r in merged_ranges(alerts, anchor.steps)]
    return {
        "type": "scatter",
        "x": xs,
        "y": [0.96] * len(xs),
        "yaxis": ALERT_AXIS,
        "mode": "markers",
        "marker": {
            "symbol": "triangle-down",
            "size": 13,
            "color": colours,
            "line": {"width": 1, "color": "#333333"},
        },
        "customdata": ids,
        "hovertext": hovers,
        "hoverinfo": "text",
        "name": "alerts",
        "showlegend": False,
        "meta": {"key": None, "role": "alerts"},
    }


def merged_ranges(
    alerts: Sequence[AlertPublic], steps: Sequence[int]
) -> list[tuple[str, int, int]]:
    """(colour, first, last) step ranges, merged per colour where closer than ~a pixel apart;
    an open alert runs to the newest step drawn (its ``last_step`` is its last refresh).

    Plotly draws each shape as its own element: thousands of short alerts would cost seconds.
    """
    gap = (steps[-1] - steps[0]) / MERGE_BUCKETS if len(steps) > 1 else 0
    ranges: list[tuple[str, int, int]] = []
    ordered = sorted(alerts, key=lambda a: (a.severity, a.first_step))
    newest = steps[-1] if steps else 0
    for alert in ordered:
        colour = SEVERITY_COLOURS.get(alert.severity, "#999999")
        end = max(alert.last_step, newest) if alert.status == "open" else alert.last_step
        last = ranges[-1] if ranges else None
        if last is not None and last[0] == colour and alert.first_step <= last[2] + gap:
            ranges[-1] = (colour, last[1], max(last[2], end))
        else:
            ranges.append((colour, alert.first_step, end))
    return ranges


def _alert_shape(
    step_range: tuple[str, int, int], anchor: SeriesData, view: View
) -> dict[str, Any]:
    colour, first, last = step_range
    x0 = traces.step_to_x(first, anchor.steps, anchor.times, view.xmode, view.t0)
    x1 = traces.step_to_x(last, anchor.steps, anchor.times, view.xmode, view.t0)
    ranged = x1 is not None and last > first
    return {
        "type": "rect" if ranged else "line",
        "xref": "x",
        "x0": x0,
        "x1": x1 if ranged else x0,
        "yref": "paper",
        "y0": 0,
        "y1": 1,
        "layer": "below",
        "fillcolor": colour,
        "opacity": 0.16 if ranged else 0.9,
        "line": {"width": 0 if ranged else 1.5, "color": colour, "dash": "dot"},
    }


def base_layout(view: View, content: PanelContent, *, has_right: bool) -> dict[str, Any]:
    """The layout every chart shares: axes for the view, theme colours, height, legend."""
    theme = THEMES.get(view.theme, THEMES["light"])
    axis = {"gridcolor": theme["grid"], "zeroline": False, "linecolor": theme["grid"]}
    scale = {"type": "log"} if view.log else {}
    xaxis: dict[str, Any] = {**axis, "title": {"text": traces.X_TITLES[view.xmode]}}
    if view.x_range is not None:
        xaxis["range"] = list(view.x_range)
    if view.xmode == "wall":
        xaxis["type"] = "date"
    layout: dict[str, Any] = {
        "height": content.height,
        "margin": {"l": 56, "r": 56 if has_right else 16, "t": 28, "b": 40},
        "paper_bgcolor": theme["paper"],
        "plot_bgcolor": theme["plot"],
        "font": {"color": theme["font"], "size": 11, "family": "Inter, system-ui, sans-serif"},
        "xaxis": xaxis,
        "yaxis": {**axis, **scale, "automargin": True, "title": {"text": text(content.unit)}},
        "yaxis3": {"overlaying": "y", "range": [0, 1], "visible": False, "fixedrange": True},
        "hovermode": "x unified",
        "showlegend": content.show_legend,
        "legend": {
            "orientation": "h",
            "y": 1.02,
            "yanchor": "bottom",
            "x": 0,
            "font": {"size": 10},
        },
        "uirevision": view.uirevision,
    }
    if has_right:
        layout["yaxis2"] = {
            **axis,
            **scale,
            "overlaying": "y",
            "side": "right",
            "showgrid": False,
            "automargin": True,
            "title": {"text": text(content.right_unit)},
        }
    return layout


def note(message: str) -> dict[str, Any]:
    """A message in the middle of an empty chart."""
    return {
        "text": message,
        "xref": "paper",
        "yref": "paper",
        "x": 0.5,
        "y": 0.5,
        "showarrow": False,
        "font": {"size": 13},
    }


def trace_index(figure: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """``{key: {"raw": i, "smooth": j}}`` for the live callback's ``extendData``."""
    index: dict[str, dict[str, int]] = {}
    for i, trace in enumerate(figure["data"]):
        meta = trace.get("meta") or {}
        if meta.get("key"):
            index.setdefault(str(meta["key"]), {})[str(meta["role"])] = i
    return index


def sparkline(
    steps: Sequence[int],
    values: Sequence[Any],
    colour: str = PALETTE[0],
    size: tuple[int, int] = (SPARK_WIDTH, SPARK_HEIGHT),
) -> str:
    """A key's trend as an SVG data URI: one line, broken at NaN, no axes; ``""`` without points.

    An image, not a Plotly chart: a list row shows it at no script cost.
    """
    numbers = traces.decode(values)
    finite = [v for v in numbers if v is not None]
    if not finite or not steps:
        return ""
    width, height = size
    lo, hi, first, last = min(finite), max(finite), steps[0], steps[-1]

    def x(step: int) -> float:
        return 1 + (width - 2) * ((step - first) / (last - first) if last > first else 0.5)

    def y(value: float) -> float:
        return height / 2 if hi == lo else 1 + (height - 2) * (hi - value) / (hi - lo)

    path, pen = [], "M"
    for step, value in zip(steps, numbers, strict=True):
        if value is None:
            pen = "M"  # a gap: the next point starts a new piece
            continue
        path.append(f"{pen}{x(step):.1f} {y(value):.1f}" + ("l0 0" if pen == "M" else ""))
        pen = "L"
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">'
        f'<path d="{"".join(path)}" fill="none" stroke="{colour}" stroke-width="1.3" '
        'stroke-linecap="round" stroke-linejoin="round"/></svg>'
    )
    return "data:image/svg+xml;charset=utf-8," + urllib.parse.quote(svg)
