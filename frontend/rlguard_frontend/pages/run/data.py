"""What the run page fetches and draws: the panel plan, every drawn series at once, figures.

Used by the page layout (the first draw arrives with the page: no extra round trip) and by the
redraw callback; no Dash callbacks here.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rlguard_backend.schemas import AlertPublic, RunPublic, SeriesData
from rlguard_frontend import figures, panel_views
from rlguard_frontend.api_client import ApiClient, carry_token
from rlguard_frontend.panels import all_keys, kl_target, plan_panels

PANEL_MAX_POINTS = 2000
MINI_MAX_POINTS = 300  # a 170-px chart shows no more; min/max buckets keep the spikes
MINIS_FIRST = 8  # mini charts drawn with the page; the rest on search or "draw all"


def make_plan(client: ApiClient, run: RunPublic, previous: dict[str, Any] | None) -> dict[str, Any]:
    """What the run page draws: panels and minis of its keys, guides and markers (JSON-able)."""
    keys = client.list_keys(run.id).data
    plan = plan_panels([k.model_dump() for k in keys])
    plan["kl_target"] = kl_target(run.config)
    plan["markers"] = [m.model_dump() for m in client.run_markers(run.id).data]
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
            times=False,
        )
        plan["entropy_start"] = panel_views.entropy_start(head.series[entropy[0]])
    return plan


def panel_ids(plan: dict[str, Any]) -> list[str]:
    """The graphs drawn with the page: registry panels, then the first mini charts.

    Plotly costs ~0.1 s a chart in the browser; the other minis are drawn on demand.
    """
    return [*plan["panels"], *list(plan["minis"])[:MINIS_FIRST]]


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
