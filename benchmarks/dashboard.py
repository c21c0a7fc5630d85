"""Dashboard benchmarks in real headless Chromium; prints one JSON object.

- live latency: ``run.log()`` in a trainer (the real hook) → the point drawn in the browser
  (goal: median ≤ 1.5 s);
- first render: opening the run page of a 200,000-step run with 40 keys until every panel
  has drawn and the other keys are listed (goal ≤ 2 s), with the sizes of the responses behind
  it, and the time a picked key's chart takes to draw; each sample beside its floor (a minimal
  Dash page drawing the same panel cards and key list, ``_dashboard_floor run``);
- many runs (``_dashboard_views``): the compare page over 50 runs × the stability panels
  (goal ≤ 2 s), grouped bands over 5 groups × 5 seeds of 20,000 steps (goal ≤ 2 s), the runs
  grid over 5,000 runs, first render and a filter (goal ≤ 1 s); each beside baselines
  measured in the same run (2 runs, the runs overlaid, 50 runs) and its floor: a minimal
  Dash page drawing as much with the same components (``_dashboard_floor``).

``rlguard up`` runs in a subprocess on a throwaway SQLite file, or on ``--db PATH``; with
``--reuse`` a file already holding the long run is not filled again (saves minutes while
iterating). ``--only render|live|compare|groups|table`` runs one part; ``--quick`` runs every
part at a tiny size (the smoke test in tests/benchmarks); ``--tree PATH`` serves another
checkout's rlguard (e.g. main's, as a baseline) with this checkout's benchmark and floor.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import math
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks import _dashboard_views as views
from benchmarks._dashboard_floor import floor_up
from benchmarks._support import POLL_MS, serving, tree_env

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
STEPS = int(os.environ.get("RLGUARD_BENCH_STEPS", "200000"))
BATCH_STEPS = 500
LATENCY_SAMPLES = 20
RENDER_SAMPLES = 3
CANONICAL_KEYS = (*views.COMPARE_KEYS, "actor/pg_loss")
KEYS = CANONICAL_KEYS + tuple(f"custom/metric_{i:02d}" for i in range(40 - len(CANONICAL_KEYS)))
# The page is complete when every panel has drawn and the other keys are listed with their
# last values (a key's chart is drawn when picked: timed separately).
ALL_DRAWN_JS = """() => {
    const drawn = g => g.data && g.data.length > 0 && g.data[0].x.length > 0;
    const panels = [...document.querySelectorAll('.panels .js-plotly-plot')];
    const cards = document.querySelectorAll('.panels .card').length;
    const rows = document.querySelectorAll('.key-row').length;
    return cards > 0 && panels.length === cards && rows >= %d && panels.every(drawn);
}"""
PICKED_DRAWN_JS = """() => [...document.querySelectorAll('.picked-charts .js-plotly-plot')]
    .some(g => g.data && g.data.length > 0 && g.data[0].x.length > 0)"""
# A pick is timed in the page from the click event: Playwright's click first waits for the
# element to hold still, which on a loaded box takes seconds the viewer never waits.
CLICK_CLOCK_JS = """document.addEventListener(
    'click', () => { window.__clicked = performance.now(); }, {capture: true, once: true})"""


def rlguard_up(
    database_url: str, tree: Path | None = None
) -> contextlib.AbstractContextManager[str]:
    """``rlguard up`` (of ``tree``, another checkout, when given) in a subprocess; yields its
    base URL."""
    args = ["rlguard", "up", "--port", "0", "--database-url", database_url]
    return serving(args, tree_env(tree))


def fill_run(base: str, run_id: str, step_count: int = STEPS) -> dict[str, Any]:
    """A ``step_count``-step run with 40 keys, posted as gzip batches of ``BATCH_STEPS`` steps."""
    started = time.perf_counter()
    with httpx.Client(base_url=base, timeout=120) as http:
        http.post("/api/v1/runs", json={"id": run_id, "project": "bench", "name": "long"})
        for start in range(0, step_count, BATCH_STEPS):
            steps = [
                {
                    "step": s,
                    "time": 1.7e9 + s,
                    "values": {k: math.sin(s / (50 + i)) + i for i, k in enumerate(KEYS)},
                }
                for s in range(start, min(step_count, start + BATCH_STEPS))
            ]
            body = gzip.compress(json.dumps({"batch_id": f"b{start}", "steps": steps}).encode())
            headers = {"content-encoding": "gzip", "content-type": "application/json"}
            http.post(
                f"/api/v1/runs/{run_id}/batches", content=body, headers=headers
            ).raise_for_status()
    return {"points": step_count * len(KEYS), "fill_s": round(time.perf_counter() - started, 1)}


def series_sizes(base: str, run_id: str, step_count: int = STEPS) -> dict[str, int]:
    """Bytes of the API answers the run page asks for on first render (x axis: steps), and the
    points of its longest panel line."""
    from rlguard_frontend.pages.run.data import LAST_VALUE_POINTS, PANEL_MAX_POINTS

    others = KEYS[len(CANONICAL_KEYS) :]
    sizes = {}
    with httpx.Client(base_url=base, timeout=60) as http:
        for name, keys, points, first in (
            ("series_panels_bytes", CANONICAL_KEYS, PANEL_MAX_POINTS, 0),
            ("series_last_values_bytes", others, LAST_VALUE_POINTS, step_count - 1),
        ):
            params: dict[str, str | int] = {
                "keys": ",".join(keys),
                "from_step": first,
                "max_points": points,
                "include_times": "false",
            }
            answer = http.get(f"/api/v1/runs/{run_id}/series", params=params)
            sizes[name] = len(answer.content)
            if first == 0:
                lines = answer.json()["series"].values()
                sizes["panel_line_points"] = max(len(line["steps"]) for line in lines)
    return sizes


def panel_shape(base: str, run_id: str) -> tuple[int, int]:
    """(panels, most lines on one) of the run page's plan for ``run_id``."""
    from rlguard_frontend.panels import plan_panels

    with httpx.Client(base_url=base, timeout=60) as http:
        keys = http.get(f"/api/v1/runs/{run_id}/keys").json()["data"]
    panels = plan_panels(keys)["panels"].values()
    return len(panels), max(len(p["keys"]) + len(p["right"]) for p in panels)


def floor_render(page: Any, url: str, others: int) -> float:
    """Seconds from opening the run page's floor to every panel drawn and the keys listed."""
    started = time.perf_counter()
    page.goto(url)
    page.wait_for_function(ALL_DRAWN_JS % others, timeout=60_000, polling=POLL_MS)
    return time.perf_counter() - started


# Recorded in the page from navigation start (ms): the layout and every Dash callback (output,
# start, end, decoded bytes, whether figures came with it) and when plotly.js was ready and the
# run page, its panel cards, all panels and everything were first drawn.
BREAKDOWN_JS = """(() => {
    const t = window.__bench = {calls: [], marks: {}};
    const realFetch = window.fetch;
    window.fetch = async (url, opts) => {
        const start = performance.now();
        const response = await realFetch(url, opts);
        const layout = String(url).includes('_dash-layout');
        if (layout || String(url).includes('_dash-update-component')) {
            const body = await response.clone().text();
            let output = '(layout)';
            try { output = layout ? output : JSON.parse(opts.body).output; } catch (e) {}
            t.calls.push({output, start, end: performance.now(), bytes: body.length,
                          figures: body.includes('"figure"')});
        }
        return response;
    };
    const drawn = g => g.data && g.data.length > 0 && g.data[0].x.length > 0;
    const mark = (name, ok) => {
        if (!(name in t.marks) && ok()) t.marks[name] = performance.now();
    };
    const check = () => {
        mark('page', () => document.querySelector('.run-page'));
        mark('plotly', () => window.Plotly);
        mark('cards', () => document.querySelector('.panels .card'));
        mark('panels', () => {
            const gs = [...document.querySelectorAll('.panels .js-plotly-plot')];
            return gs.length > 0 && gs.every(drawn);
        });
        requestAnimationFrame(check);
    };
    requestAnimationFrame(check);
})()"""


RESOURCES_JS = """performance.getEntriesByType('resource').map(r => ({
    name: r.name, end: r.responseEnd, bytes: r.transferSize}))"""


def _breakdown(bench: dict[str, Any], done_ms: float) -> dict[str, Any]:
    answers = sorted(bench["calls"], key=lambda c: c["end"])
    layouts = [c for c in answers if c["output"] == "(layout)"]
    calls = [c for c in answers if c["output"] != "(layout)"]
    series = [c for c in answers if c["figures"]]  # with the layout, or a page/figure callback
    marks = bench["marks"]
    before = [r for r in bench["resources"] if r["end"] <= done_ms]
    return {
        "dash_layout_s": (layouts[0]["end"] if layouts else 0) / 1000,
        "first_callback_sent_s": (calls[0]["start"] if calls else 0) / 1000,
        "first_series_response_s": (series[0]["end"] if series else 0) / 1000,
        "plotly_loaded_s": marks.get("plotly", 0) / 1000,
        "layout_s": marks.get("cards", 0) / 1000,
        "panels_drawn_s": marks.get("panels", 0) / 1000,
        "all_drawn_s": done_ms / 1000,
        "callbacks_before_done": sum(1 for c in calls if c["end"] <= done_ms),
        # on the wire (gzip, headers included): everything fetched before done, and plotly.js
        "transferred_bytes": sum(r["bytes"] for r in before),
        "plotly_bytes": sum(r["bytes"] for r in before if "plotly" in r["name"]),
        "biggest_responses": sorted(
            ({"output": c["output"][:60], "bytes": c["bytes"]} for c in answers),
            key=lambda c: -c["bytes"],
        )[:4],
    }


def first_render(
    browser: Any, base: str, run_id: str, floor: str, samples: int = RENDER_SAMPLES
) -> dict[str, Any]:
    """Median first render of the run page in Chromium, with its response size and breakdown,
    each sample beside one of its ``floor`` page (the same drawing, no rlguard behind it)."""
    times, floors, dash_bytes, breakdowns, picks, listed = [], [], [], [], [], 0
    others = len(KEYS[len(CANONICAL_KEYS) :])
    for _ in range(samples):
        context = browser.new_context(viewport={"width": 1600, "height": 1000})
        floors.append(floor_render(context.new_page(), floor, others))
        context.close()
        context = browser.new_context(viewport={"width": 1600, "height": 1000})
        context.add_init_script(BREAKDOWN_JS)
        page = context.new_page()
        started = time.perf_counter()
        page.goto(f"{base}/runs/{run_id}")
        page.wait_for_function(ALL_DRAWN_JS % others, timeout=60_000, polling=POLL_MS)
        done_ms = page.evaluate("performance.now()")
        times.append(time.perf_counter() - started)
        page.wait_for_timeout(3000)  # a few live ticks: what the page keeps receiving
        bench = page.evaluate(f"({{...window.__bench, resources: {RESOURCES_JS}}})")
        listed = page.locator(".key-row").count()
        page.evaluate(CLICK_CLOCK_JS)
        page.locator(".key-name").first.click()
        page.wait_for_function(PICKED_DRAWN_JS, timeout=60_000, polling=POLL_MS)
        picks.append(page.evaluate("performance.now() - window.__clicked") / 1000)
        # the layout and the callback answers (decoded) that arrived before the page was complete
        dash_bytes.append(sum(c["bytes"] for c in bench["calls"] if c["end"] <= done_ms))
        breakdowns.append(_breakdown(bench, done_ms))
        breakdowns[-1]["bytes_per_idle_tick"] = (
            sum(c["bytes"] for c in bench["calls"] if c["end"] > done_ms) // 3
        )
        context.close()
    median = sorted(range(len(times)), key=lambda i: times[i])[len(times) // 2]
    breakdown = {
        k: round(v, 3) if isinstance(v, float) else v for k, v in breakdowns[median].items()
    }
    return {
        "first_render_s": round(statistics.median(times), 3),
        "first_render_samples_s": [round(t, 3) for t in times],
        "first_render_goal_s": 2.0,
        "floor_first_render_s": round(statistics.median(floors), 3),
        "floor_first_render_samples_s": [round(t, 3) for t in floors],
        "first_render_ratio_to_floor": round(
            statistics.median(times) / statistics.median(floors), 2
        ),
        "first_render_breakdown_of_median": breakdown,
        "first_render_keys_listed": listed,
        "pick_key_s": round(statistics.median(picks), 3),
        "dash_responses_bytes": max(dash_bytes),
    }


WATCH_JS = """() => {
    window.__seen = {};
    const sel = `[id='{"panel":"entropy","type":"run-panel-graph"}'] .js-plotly-plot`;
    const check = () => {
        const el = document.querySelector(sel);
        if (el && el.data && el.data.length) {
            const xs = el.data[0].x;
            const last = xs[xs.length - 1];
            if (!(last in window.__seen)) window.__seen[last] = Date.now();
        }
        requestAnimationFrame(check);
    };
    check();
}"""


def live_latency(
    browser: Any, base: str, spool: str, samples: int = LATENCY_SAMPLES
) -> dict[str, Any]:
    """Seconds from ``run.log()`` to the point drawn in Chromium, over ``samples`` points."""
    import rlguard

    run = rlguard.init(project="bench", name="live", url=base, spool_dir=spool, gpu=False)
    run.log({"actor/entropy": 1.0}, step=0)
    run.flush()
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    page.goto(f"{base}/runs/{run.id}")
    page.wait_for_function(
        "document.querySelectorAll('.panels .js-plotly-plot').length > 0", polling=POLL_MS
    )
    page.evaluate(WATCH_JS)
    latencies = []
    for step in range(1, samples + 1):
        time.sleep(random.uniform(0.0, 1.0))  # de-phase from the sender's and page's timers
        logged = time.time()
        run.log({"actor/entropy": 1.0 / (1 + step)}, step=step)
        page.wait_for_function(
            f"window.__seen[{step}] !== undefined", timeout=30_000, polling=POLL_MS
        )
        latencies.append(page.evaluate(f"window.__seen[{step}]") / 1000 - logged)
    run.finish()
    page.close()
    return {
        "live_latency_median_s": round(statistics.median(latencies), 3),
        "live_latency_p90_s": round(sorted(latencies)[int(0.9 * len(latencies)) - 1], 3),
        "live_latency_max_s": round(max(latencies), 3),
        "live_latency_goal_s": 1.5,
        "live_samples": len(latencies),
    }


def _has_long_run(base: str, steps: int) -> bool:
    with httpx.Client(base_url=base, timeout=30) as http:
        answer = http.get("/api/v1/runs/bench-long")
        return answer.status_code == 200 and answer.json().get("last_step") == steps - 1


PARTS = ("live", "render", "compare", "groups", "table")


def main() -> None:
    """Measure the dashboard's views in real Chromium and print the figures as JSON."""
    from playwright.sync_api import sync_playwright

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, help="SQLite file to use (default: a throwaway one)")
    parser.add_argument("--reuse", action="store_true", help="keep a long run already in --db")
    parser.add_argument("--only", choices=PARTS, help="run one part")
    parser.add_argument("--quick", action="store_true", help="every part, tiny (smoke test)")
    parser.add_argument("--tree", type=Path, help="serve another checkout's rlguard (a baseline)")
    args = parser.parse_args()
    parts = [args.only] if args.only else list(PARTS)
    sizes = views.Sizes.quick() if args.quick else views.Sizes()
    steps = 2000 if args.quick else STEPS
    with tempfile.TemporaryDirectory() as folder:
        path = args.db.resolve() if args.db else Path(folder) / "bench.db"
        if args.db and not args.reuse:
            path.unlink(missing_ok=True)
        result: dict[str, Any] = {"benchmark": "dashboard", "steps": steps, "keys": len(KEYS)}
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            with rlguard_up(f"sqlite:///{path}", args.tree) as base:
                if "live" in parts:
                    result.update(live_latency(browser, base, folder, 3 if args.quick else 20))
                if "render" in parts:
                    if not (args.reuse and _has_long_run(base, steps)):
                        result.update(fill_run(base, "bench-long", steps))
                    result.update(series_sizes(base, "bench-long", steps))
                    panels, lines = panel_shape(base, "bench-long")
                    others = len(KEYS) - len(CANONICAL_KEYS)
                    points = result["panel_line_points"]
                    with floor_up("run", lines, panels, points, others) as floor:
                        result.update(
                            first_render(browser, base, "bench-long", f"{floor}/", sizes.samples)
                        )
                if "compare" in parts:
                    run_ids = views.seed_compare(base, sizes)
                    result["compare"] = views.compare_overlay(browser, base, run_ids, sizes.samples)
                if "groups" in parts:
                    run_ids = views.seed_groups(base, sizes)
                    result["groups"] = views.grouped_bands(
                        browser, base, run_ids, sizes.groups, sizes.samples
                    )
            if "table" in parts:
                result["table"] = _table(browser, Path(folder) / "table.db", sizes, args.tree)
            browser.close()
    print(json.dumps(result))


def _table(browser: Any, path: Path, sizes: views.Sizes, tree: Path | None) -> dict[str, Any]:
    """The runs grid on a database of its own: 50 runs (a baseline), then ``table_runs`` beside
    the floor (the same grid, rows served from memory)."""
    url = f"sqlite:///{path}"
    total = sizes.table_runs
    with rlguard_up(url, tree) as base, floor_up("grid", total) as floor:
        views.seed_table(url, 50, "first")
        baseline = views.runs_table(browser, {"50": f"{base}/"}, 50, sizes.samples)["50"]
        views.seed_table(url, total - 50, "rest")
        grids = {"rlguard": f"{base}/", "floor": f"{floor}/"}
        measured = views.runs_table(browser, grids, total, sizes.samples)
    return {**measured["rlguard"], "baseline_50_runs": baseline, "floor": measured["floor"]}


if __name__ == "__main__":
    main()
