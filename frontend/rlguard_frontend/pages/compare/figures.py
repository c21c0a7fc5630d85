"""The compare page's figures: runs overlaid, each with its own markers, or groups as bands.

Pure like ``figures``: series in, Plotly figure dicts out. Overlaid, every run whose marks are
given draws its restarts, rewinds, learning-rate changes and WARN/CRITICAL alerts in its own
line's colour (markers dashed and labelled, alerts dotted), so a marker says whose it is
without a legend of its own; the severity of an alert is on the run's page.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlguard_backend.schemas import AlertPublic, BandPublic, SeriesData
from rlguard_frontend.chart_markers import marker_overlay
from rlguard_frontend.figures import (
    Line,
    PanelContent,
    View,
    base_layout,
    note,
    palette,
    panel_figure,
    text,
)

LEGEND_MAX_RUNS = 12
BASELINE_WIDTH = 2.4  # the baseline's line among many runs' (theirs: 1.2)
BAND_OPACITY = 0.2
MARKED_SEVERITIES = ("critical", "warn")  # info alerts stay on the run page: less clutter


@dataclass(frozen=True)
class RunMarks:
    """What a run draws across its charts: markers (``GET /runs/{id}/markers``) and alerts."""

    markers: Sequence[Mapping[str, Any]] = ()
    alerts: Sequence[AlertPublic] = field(default_factory=tuple)


def compare_figure(
    signal: str,
    unit: str,
    runs: Sequence[tuple[str, SeriesData | None, float | None]],
    view: View,
    marks: Sequence[RunMarks | None] = (),
    baseline: int = 0,
) -> dict[str, Any]:
    """One signal of several runs (label, series, start time) overlaid; the legend names runs.

    ``marks[i]`` (when given) are run ``i``'s, drawn in its colour. Past ``LEGEND_MAX_RUNS``
    the legend gives way to per-line hover, and the lines of one colour (all but the
    ``baseline``-th run's, drawn thicker on top) become one trace: a browser draws 9 panels of
    50 runs as 9 × 9 traces rather than 9 × 50.
    """
    padded = list(marks) + [None] * (len(runs) - len(marks))
    drawn = [
        (index, run, mark)
        for index, (run, mark) in enumerate(zip(runs, padded, strict=True))
        if run[1] is not None
    ]
    lines = [
        Line(key=f"{signal}:{i}", series=series, label=name, t0=t0)
        for i, (_, (name, series, t0), _) in enumerate(drawn)
        if series is not None
    ]
    few = len(lines) <= LEGEND_MAX_RUNS
    content = PanelContent(lines=lines, unit=unit, height=300, show_legend=few)
    figure = panel_figure(content, view)
    colours = palette(view.theme)
    layout = figure["layout"]
    for index, (line, (_, _, mark)) in enumerate(zip(lines, drawn, strict=True)):
        if mark is None:
            continue
        alerts = [a for a in mark.alerts if a.severity in MARKED_SEVERITIES]
        colour = colours[index % len(colours)]
        shapes, notes = marker_overlay(mark.markers, alerts, line.series, view, colour, line.label)
        layout["shapes"] += shapes
        layout["annotations"] += notes
    if not few:
        layout["hovermode"] = "closest"
        shown = [index for index, _, _ in drawn]
        figure["data"] = _merged_by_colour(
            figure["data"], f"{signal}:{shown.index(baseline)}" if baseline in shown else None
        )
    return figure


def _merged_by_colour(data: list[dict[str, Any]], baseline: str | None) -> list[dict[str, Any]]:
    """The traces of each colour and role as one, its lines apart by a gap (``None``) and each
    point's hover naming its run; the ``baseline`` line's traces stay apart, thicker, on top."""
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    own: list[dict[str, Any]] = []
    for trace in data:
        if trace["meta"]["key"] == baseline:
            own.append({**trace, "line": {**trace["line"], "width": BASELINE_WIDTH}})
            continue
        group = (trace["line"]["color"], trace["meta"]["role"])
        if group not in merged:
            merged[group] = {
                **trace,
                "x": [],
                "y": [],
                "text": [],
                "name": "",
                "legendgroup": "",
                "meta": {"key": "|".join(group), "role": group[1], "runs": 0},
                "hovertemplate": f"%{{text}}: {trace['hovertemplate']}<extra></extra>",
            }
        into = merged[group]
        gap = [None] if into["x"] else []
        into["x"] += gap + trace["x"]
        into["y"] += gap + trace["y"]
        into["text"] += gap + [trace["name"]] * len(trace["x"])
        into["meta"]["runs"] += 1
    return [*merged.values(), *own]


def band_figure(
    unit: str,
    groups: Sequence[tuple[str, BandPublic]],
    spread: str,
    view: View,
    markers: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """Each group's mean line over its ``spread`` band (``"std"``: ±1 std, ``"minmax"``).

    Bands are aligned on steps, so the x axis is steps whatever the view's axis.
    """
    colours = palette(view.theme)
    data: list[dict[str, Any]] = []
    for index, (label, band) in enumerate(groups):
        data += _band_traces(label, band, spread, colours[index % len(colours)])
    stepped = View(**{**view.__dict__, "xmode": "step", "x_range": view.x_range})
    layout = base_layout(stepped, PanelContent(lines=(), unit=unit, height=300), has_right=False)
    empty = SeriesData.model_construct(steps=[], values=[], times=[], last_step=None)
    layout["shapes"], layout["annotations"] = marker_overlay(markers, (), empty, stepped)
    if not groups:
        layout["annotations"].append(note("no points in this step range"))
    return {"data": data, "layout": layout}


def _band_traces(label: str, band: BandPublic, spread: str, colour: str) -> list[dict[str, Any]]:
    """The band's lower edge, its upper edge filled down to it, and its mean line."""
    lower, upper = _band_edges(band, spread)
    common = {"type": "scatter", "mode": "lines", "x": band.steps, "legendgroup": label}
    edge = {"width": 0, "color": colour}
    return [
        {**common, "y": lower, "line": edge, "showlegend": False, "hoverinfo": "skip"},
        {
            **common,
            "y": upper,
            "line": edge,
            "fill": "tonexty",
            "fillcolor": _translucent(colour, BAND_OPACITY),
            "showlegend": False,
            "hoverinfo": "skip",
        },
        {
            **common,
            "y": band.mean,
            "name": text(label),
            "line": {"color": colour, "width": 2},
            "customdata": band.n,
            "hovertemplate": "%{y:.4g} (n=%{customdata})",
            "meta": {"key": label, "role": "mean"},
        },
    ]


def _band_edges(band: BandPublic, spread: str) -> tuple[list[Any], list[Any]]:
    if spread == "minmax":
        return band.min, band.max
    pairs = zip(band.mean, band.std, strict=True)
    edges = [(None, None) if m is None or s is None else (m - s, m + s) for m, s in pairs]
    return [lo for lo, _ in edges], [hi for _, hi in edges]


def _translucent(colour: str, opacity: float) -> str:
    red, green, blue = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({red},{green},{blue},{opacity})"
