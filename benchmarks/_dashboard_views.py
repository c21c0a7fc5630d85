"""The many-runs views of benchmarks/dashboard.py: compare overlay, grouped bands, runs table.

Each scenario times the first complete render in real Chromium from ``page.goto`` and, as
its baselines in the same run, the same page over a small slice of the same data (2 runs
instead of 50, the runs overlaid instead of grouped, 50 runs instead of 5,000) and the floor
(``_dashboard_floor``): a minimal Dash page drawing as much with the same components, no API
behind it, so ``first_render_s - floor.first_render_s`` is what rlguard itself adds.
"""

from __future__ import annotations

import gzip
import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx

from benchmarks._dashboard_floor import floor_up
from benchmarks._support import POLL_MS
from rlguard_frontend.pages.compare.data import points_per_run
from rlguard_frontend.pages.compare.page import GROUP_BINS

# The keys of the stability panels, verl-style (the run page benchmark adds a policy loss).
COMPARE_KEYS = (
    "actor/entropy",
    "actor/ppo_kl",
    "actor/kl_loss",
    "actor/pg_clipfrac",
    "actor/pg_clipfrac_lower",
    "critic/score/mean",
    "response_length/mean",
    "response_length/clip_ratio",
    "actor/grad_norm",
)
GROUP_KEYS = ("actor/entropy", "critic/score/mean", "actor/ppo_kl", "actor/pg_clipfrac")
BATCH_STEPS = 1000
# Complete: every card on the compare page has its plot, each with at least %d mean/raw lines
# (a trace holding the lines of several runs says how many in ``meta.runs``).
COMPARE_DRAWN_JS = """([role, lines]) => {
    const cards = document.querySelectorAll('.compare-grid .card').length;
    const plots = [...document.querySelectorAll('.compare-grid .js-plotly-plot')];
    const count = p => p.data.filter(t => t.meta && t.meta.role === role && t.x.length > 0)
        .reduce((sum, t) => sum + (t.meta.runs || 1), 0);
    return cards > 0 && plots.length === cards && plots.every(p => p.data && count(p) >= lines);
}"""
# What a page shows when it never becomes ready: its error lines and each plot's traces.
STATE_JS = """() => ({
    errors: [...document.querySelectorAll('.error, .empty, .dash-fe-error__title')]
        .map(e => e.innerText).filter(t => t),
    cards: document.querySelectorAll('.compare-grid .card').length,
    plots: [...document.querySelectorAll('.js-plotly-plot')].map(p => (p.data || [])
        .map(t => `${t.meta && t.meta.role}:${t.x ? t.x.length : 0}`).join(' ')),
})"""
# Responses of the Dash callbacks and layout, decoded bytes, recorded from navigation start;
# ``call`` marks a callback's (its round trip comes after the layout's).
RESPONSES_JS = """(() => {
    window.__answers = [];
    const realFetch = window.fetch;
    window.fetch = async (url, opts) => {
        const response = await realFetch(url, opts);
        if (String(url).includes('_dash-')) {
            const body = await response.clone().text();
            window.__answers.push({end: performance.now(), bytes: body.length,
                                   call: String(url).includes('_dash-update-component')});
        }
        return response;
    };
})()"""


@dataclass(frozen=True)
class Sizes:
    """How big each scenario is (``quick`` for the smoke test)."""

    compare_runs: int = 50
    compare_steps: int = 2000
    groups: int = 5
    seeds: int = 5
    group_steps: int = 20_000
    table_runs: int = 5000
    samples: int = 3

    @classmethod
    def quick(cls) -> Sizes:
        return cls(
            compare_runs=6,
            compare_steps=200,
            groups=2,
            seeds=2,
            group_steps=500,
            table_runs=120,
            samples=1,
        )


def _post_run(http: httpx.Client, run_id: str, config: dict[str, Any], rows: Any) -> None:
    body = {"id": run_id, "project": "bench-views", "name": run_id, "config": config}
    http.post("/api/v1/runs", json=body).raise_for_status()
    rows = list(rows)
    for start in range(0, len(rows), BATCH_STEPS):
        batch = {"batch_id": f"b{start}", "steps": rows[start : start + BATCH_STEPS]}
        packed = gzip.compress(json.dumps(batch).encode())
        headers = {"content-encoding": "gzip", "content-type": "application/json"}
        http.post(
            f"/api/v1/runs/{run_id}/batches", content=packed, headers=headers
        ).raise_for_status()


def seed_compare(base: str, sizes: Sizes) -> list[str]:
    """``compare_runs`` runs of ``compare_steps`` steps logging the stability panels' keys."""
    run_ids = [f"cmp-{i:03d}" for i in range(sizes.compare_runs)]
    with httpx.Client(base_url=base, timeout=120) as http:
        for i, run_id in enumerate(run_ids):
            rows = (
                {
                    "step": s,
                    "values": {
                        k: math.sin(s / (40 + j) + i) * 0.1 + j for j, k in enumerate(COMPARE_KEYS)
                    },
                }
                for s in range(sizes.compare_steps)
            )
            _post_run(http, run_id, {"lr": 1e-6 * (1 + i % 5), "seed": i}, rows)
    return run_ids


def seed_groups(base: str, sizes: Sizes) -> list[str]:
    """``groups`` learning rates × ``seeds`` seeds of ``group_steps`` steps each."""
    run_ids = []
    with httpx.Client(base_url=base, timeout=120) as http:
        for g in range(sizes.groups):
            for seed in range(sizes.seeds):
                run_id = f"grp-{g}-{seed}"
                rows = (
                    {
                        "step": s,
                        "values": {
                            k: math.exp(-s / (5000 + 1000 * g)) + 0.05 * math.sin(s / 9 + seed) + j
                            for j, k in enumerate(GROUP_KEYS)
                        },
                    }
                    for s in range(sizes.group_steps)
                )
                _post_run(http, run_id, {"optim": {"lr": 1e-6 * (g + 1)}, "seed": seed}, rows)
                run_ids.append(run_id)
    return run_ids


def headline_config(i: int) -> dict[str, Any]:
    """The config of the ``i``-th run of a sweep: a few learning rates, β, ε and placements."""
    placements = ("loss", "reward", "none")
    return {
        "lr": 1e-7 * (1 + i % 50),
        "kl_coef": 0.001 * (i % 7),
        "clip_ratio": 0.2 + 0.01 * (i % 3),
        "kl_placement": placements[i % 3],
        "seed": i % 5,
    }


def seed_table(
    database_url: str,
    count: int,
    project: str,
    config_of: Callable[[int], dict[str, Any]] = headline_config,
    name: str = "sweep-{i:05d}",
) -> None:
    """``count`` finished runs, newest first by index, written straight into the database."""
    from rlguard_backend.core.db import make_engine, make_session_factory, write_session
    from rlguard_backend.models import Run

    engine = make_engine(database_url)
    now = datetime.now(timezone.utc)
    with write_session(make_session_factory(engine)) as session:
        for i in range(count):
            session.add(
                Run(
                    id=f"{project}-{i:05d}",
                    project=project,
                    name=name.format(i=i),
                    status="finished",
                    config=config_of(i),
                    summary={},
                    created_at=now - timedelta(seconds=i),
                    updated_at=now,
                )
            )
        session.commit()
    engine.dispose()


def _open(browser: Any, url: str, ready: str, arg: Any = None) -> tuple[float, int, int, Any]:
    """Seconds from goto until ``ready`` holds, Dash bytes and callbacks answered by then, and
    the page."""
    context = browser.new_context(viewport={"width": 1600, "height": 1000})
    context.add_init_script(RESPONSES_JS)
    page = context.new_page()
    started = time.perf_counter()
    page.goto(url)
    try:
        page.wait_for_function(ready, arg=arg, timeout=120_000, polling=POLL_MS)
    except Exception as exc:
        raise RuntimeError(f"{url} never became ready: {page.evaluate(STATE_JS)}") from exc
    elapsed = time.perf_counter() - started
    done = page.evaluate("performance.now()")
    answers = [a for a in page.evaluate("window.__answers") if a["end"] <= done]
    return elapsed, sum(a["bytes"] for a in answers), sum(a["call"] for a in answers), page


Case = tuple[str, str, Any]  # (URL, ready condition, its argument)


def _median_renders(browser: Any, cases: dict[str, Case], samples: int) -> dict[str, Any]:
    """Each case's median first render; the cases take turns, so load drifts hit them alike."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    sizes: dict[str, list[int]] = {name: [] for name in cases}
    panels: dict[str, int] = {}
    calls: dict[str, int] = {}
    for _ in range(samples):
        for name, (url, ready, arg) in cases.items():
            elapsed, size, calls[name], page = _open(browser, url, ready, arg)
            times[name].append(elapsed)
            sizes[name].append(size)
            panels[name] = page.evaluate("document.querySelectorAll('.compare-grid .card').length")
            page.context.close()
    return {
        name: {
            "first_render_s": round(statistics.median(times[name]), 3),
            "samples_s": [round(t, 3) for t in times[name]],
            "dash_responses_bytes": max(sizes[name]),
            "callbacks_before_drawn": calls[name],
            "panels": panels[name],
        }
        for name in cases
    }


def compare_overlay(browser: Any, base: str, run_ids: list[str], samples: int) -> dict[str, Any]:
    """The compare page over every run, over two of them, and the floor drawing as much."""
    url = f"{base}/compare?runs="
    runs = len(run_ids)
    points = _drawn_points(base, run_ids[0], points_per_run(runs))
    panels = len(_compared_panels())
    with floor_up("charts", runs, panels, points) as floor:
        drawn = _median_renders(
            browser,
            {
                "many": (url + ",".join(run_ids), COMPARE_DRAWN_JS, ["raw", runs]),
                "two": (url + ",".join(run_ids[:2]), COMPARE_DRAWN_JS, ["raw", 2]),
                "floor": (f"{floor}/", COMPARE_DRAWN_JS, ["raw", runs]),
            },
            samples,
        )
    floor_drawn = {**drawn["floor"], "lines": runs, "points_per_line": points}
    return {
        "runs": runs,
        **drawn["many"],
        "goal_s": 2.0,
        "baseline_2_runs": drawn["two"],
        "floor": floor_drawn,
    }


def _drawn_points(base: str, run_id: str, max_points: int) -> int:
    """The points the compare page draws of a run's line: a series downsampled to
    ``max_points`` keeps up to two (its min and max) of each of up to ``max_points / 2 - 1``
    buckets, so most lines have fewer."""
    params: dict[str, str | int] = {"keys": COMPARE_KEYS[0], "max_points": max_points}
    answer = httpx.get(f"{base}/api/v1/runs/{run_id}/series", params=params, timeout=60)
    return len(answer.raise_for_status().json()["series"][COMPARE_KEYS[0]]["steps"])


def _compared_panels() -> list[str]:
    """The compare page's panels for ``COMPARE_KEYS``: one per canonical signal they log."""
    from rlguard_backend.signals import canonical_signal
    from rlguard_frontend.pages.compare.data import SIGNAL_UNITS

    logged = {canonical_signal(k) for k in COMPARE_KEYS}
    return [s for s in SIGNAL_UNITS if s in logged]


def grouped_bands(
    browser: Any, base: str, run_ids: list[str], groups: int, samples: int
) -> dict[str, Any]:
    """The runs grouped by learning rate (one band each), overlaid ungrouped, and the floor."""
    url = f"{base}/compare?runs={','.join(run_ids)}"
    with httpx.Client(base_url=base, timeout=120) as http:
        params = {
            "runs": ",".join(run_ids),
            "by": "config.optim.lr",
            "signals": "entropy,reward_mean,ppo_kl,clipfrac",
        }
        started = time.perf_counter()
        answer = http.get("/api/v1/groups", params=params)
        api_s = time.perf_counter() - started
    with floor_up("bands", groups, len(GROUP_KEYS), GROUP_BINS) as floor:
        drawn = _median_renders(
            browser,
            {
                "banded": (url + "&group=config.optim.lr", COMPARE_DRAWN_JS, ["mean", groups]),
                "overlaid": (url, COMPARE_DRAWN_JS, ["raw", len(run_ids)]),
                "floor": (f"{floor}/", COMPARE_DRAWN_JS, ["mean", groups]),
            },
            samples,
        )
    return {
        "groups": groups,
        "runs": len(run_ids),
        **drawn["banded"],
        "groups_api_s": round(api_s, 3),
        "groups_api_bytes": len(answer.content),
        "goal_s": 2.0,
        "baseline_overlaid": drawn["overlaid"],
        "floor": {**drawn["floor"], "lines": groups, "points_per_line": GROUP_BINS},
    }


GRID_READY_JS = """(text) => [...document.querySelectorAll('.runs-count')]
    .some(e => e.innerText === text)
    && document.querySelectorAll('.ag-center-cols-container .ag-row').length > 0"""


def runs_table(browser: Any, bases: dict[str, str], total: int, samples: int) -> dict[str, Any]:
    """First render of the runs grid over ``total`` runs and one filter typed into it, for each
    of ``bases`` (name: the grid's URL) in turn."""
    first: dict[str, list[float]] = {name: [] for name in bases}
    filtered: dict[str, list[float]] = {name: [] for name in bases}
    calls: dict[str, int] = {}
    for _ in range(samples):
        for name, url in bases.items():
            elapsed, _, calls[name], page = _open(browser, url, GRID_READY_JS, f"{total:,} runs")
            first[name].append(elapsed)
            filtered[name].append(_filter_grid(page))
            page.context.close()
    return {
        name: {
            "runs": total,
            "first_render_s": round(statistics.median(first[name]), 3),
            "filter_s": round(statistics.median(filtered[name]), 3),
            "callbacks_before_drawn": calls[name],
            "goal_s": 1.0,
        }
        for name in bases
    }


def _filter_grid(page: Any) -> float:
    """Seconds from typing a name filter until the grid shows only the runs it matches."""
    name_filter = page.locator(".ag-floating-filter[aria-colindex='3'] input")
    started = time.perf_counter()
    name_filter.fill("sweep-0004")  # 10 of every 10,000: sweep-00040 … sweep-00049
    page.wait_for_function(
        "() => [...document.querySelectorAll('.runs-count')].some("
        "e => e.innerText.includes(' runs match'))"
        " && [...document.querySelectorAll('.ag-center-cols-container .ag-row "
        "[col-id=\"name\"]')].every(c => c.innerText.startsWith('sweep-0004'))",
        timeout=60_000,
        polling=POLL_MS,
    )
    return time.perf_counter() - started
