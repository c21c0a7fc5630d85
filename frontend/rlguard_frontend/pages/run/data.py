"""What the run page fetches and draws: the plan, every drawn series at once, last values.

Used by the page layout (the first draw arrives with the page: no extra round trip) and by the
redraw callback; no Dash callbacks here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rlguard_backend.schemas import (
    START_SPAN_STEPS,
    AlertPublic,
    MetricKeyPublic,
    RunPublic,
    SeriesData,
)
from rlguard_frontend import figures, panel_views
from rlguard_frontend.api_client import ApiClient, carry_token
from rlguard_frontend.panels import all_keys, kl_target, plan_panels

# A panel's plot is ~560 px wide (two 480 px+ columns beside the alerts): 1,000 points are
# ~500 min/max buckets, about one a pixel. 2,000 made the first layout ~0.5 MB.
PANEL_MAX_POINTS = 1000
MINI_MAX_POINTS = 300  # a 170-px chart shows no more; min/max buckets keep the spikes
LAST_VALUE_POINTS = 8  # the API's least max_points; every bucket keeps its last point
SPARK_POINTS = 64  # a 120-px sparkline: 15 min/max buckets
KEYS_IN_URL_CHARS = 4000  # a longer key list is not named: the API then reads every key


def make_plan(
    client: ApiClient,
    run: RunPublic,
    previous: dict[str, Any] | None,
    keys: Sequence[MetricKeyPublic] | None = None,
) -> dict[str, Any]:
    """What the run page draws: panels and minis of its ``keys`` (read when not given), guides
    and markers (JSON-able)."""
    keys = client.list_keys(run.id).data if keys is None else keys
    plan = plan_panels([k.model_dump() for k in keys])
    plan["kl_target"] = kl_target(run.config)
    plan["markers"] = [m.model_dump() for m in client.run_markers(run.id).data]
    entropy = plan["panels"].get("entropy", {}).get("keys", [])
    # Read until known; once known it is fixed (the detectors' start never moves).
    plan["entropy_start"] = (previous or {}).get("entropy_start")
    described = next((k for k in keys if entropy and k.name == entropy[0]), None)
    if described is not None and plan["entropy_start"] is None:
        first = described.first_step or 0
        head = client.read_series(
            run.id, entropy[:1], from_step=first, to_step=first + START_SPAN_STEPS, times=False
        )
        plan["entropy_start"] = panel_views.entropy_start(head.series[entropy[0]])
    return plan


def panel_ids(plan: dict[str, Any], picked: Sequence[str] = ()) -> list[str]:
    """The graphs drawn with the page: registry panels, then the charts of the picked keys.

    Plotly costs ~0.1 s a chart in the browser: the other keys are a list until picked.
    """
    return [*plan["panels"], *picked_ids(plan, picked)]


def picked_ids(plan: dict[str, Any], picked: Sequence[str]) -> list[str]:
    """The ``k<n>`` ids of the picked keys the run logs, in the order picked."""
    by_name = {name: mini for mini, name in plan["minis"].items()}
    return [by_name[name] for name in picked if name in by_name]


def key_steps(plan: dict[str, Any], keys: Sequence[MetricKeyPublic]) -> dict[str, int | None]:
    """The last step of each key outside the panels: when it moves, its last value did."""
    others = set(plan["minis"].values())
    return {key.name: key.last_step for key in keys if key.name in others}


def last_values(client: ApiClient, run_id: str, steps: Mapping[str, int | None]) -> dict[str, Any]:
    """Each key's last value (as on the wire), for keys by their last step: one small read.

    Read from the oldest of those last steps, at most 8 points a key: the last is the key's own.
    """
    logged = {name: step for name, step in steps.items() if step is not None}
    if not logged:
        return {}
    names = sorted(logged)
    answer = client.read_series(
        run_id,
        names if len(",".join(names)) <= KEYS_IN_URL_CHARS else [],
        from_step=min(logged.values()),
        max_points=LAST_VALUE_POINTS,
        times=False,
    )
    return {n: s.values[-1] for n, s in answer.series.items() if n in logged and s.values}


def value_text(value: Any) -> str:
    """A last value as the list shows it: 4 significant digits, NaN and infinities by name."""
    if value is None:
        return "—"
    return f"{value:.4g}" if isinstance(value, int | float) else str(value)


def needs_times(xmode: str | None) -> bool:
    """Whether the x axis is drawn from wall times: asking for them costs the API ~10×."""
    return (xmode or "step") != "step"


def read_drawn_series(
    client: ApiClient,
    run_id: str,
    plan: dict[str, Any],
    smoothing: float,
    zoom: dict[str, int] | None,
    drawn: list[str],
    xmode: str | None,
) -> dict[str, SeriesData]:
    """The keys of the ``drawn`` graphs: panels' at full width, minis' small, concurrently."""
    span = {"from_step": zoom["from"], "to_step": zoom["to"]} if zoom else {}
    minis = {plan["minis"][p] for p in drawn if p in plan["minis"]}
    every_mini = set(plan["minis"].values())
    panels = {"panels": {p: e for p, e in plan["panels"].items() if p in drawn}}
    main = [k for k in all_keys(panels) if k not in every_mini]
    jobs = [(keys, n) for keys, n in ((main, PANEL_MAX_POINTS), (sorted(minis), MINI_MAX_POINTS))]
    jobs = [job for job in jobs if job[0]]
    if not jobs:
        return {}
    times = needs_times(xmode)

    def read(job: tuple[list[str], int]) -> dict[str, SeriesData]:
        keys, points = job
        return client.read_series(
            run_id, keys, max_points=points, smoothing=smoothing, times=times, **span
        ).series

    with ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="rlguard-series") as pool:
        series: dict[str, SeriesData] = {}
        for answer in pool.map(carry_token(read), jobs):
            series.update(answer)
    return series


def draw(
    ids: list[str],
    plan: dict[str, Any],
    series: dict[str, SeriesData],
    alerts: list[AlertPublic],
    view: figures.View,
    *,
    frozen: bool = False,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Figures for ``ids`` and the small live cursor the tick callback carries."""
    built = panel_views.build_figures(ids, plan, series, alerts, view)
    cursor = {
        "cursor": {k: (s.steps[-1] if s.steps else -1) for k, s in series.items()},
        "traces": {p: figures.trace_index(f) for p, f in zip(ids, built, strict=True)},
        "tails": panel_views.smoothed_tails(series),
        "t0": view.t0,
        "frozen": frozen,
        "appended": 0,
    }
    return built, cursor
