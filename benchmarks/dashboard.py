"""Dashboard benchmarks in real headless Chromium; prints one JSON object.

- live latency: ``run.log()`` in a trainer (the real hook) → the point drawn in the browser
  (goal: median ≤ 1.5 s);
- first render: opening the run page of a 200,000-step run with 40 keys until every panel
  and mini chart has drawn (goal ≤ 2 s), with the sizes of the responses behind it.

``rlguard up`` runs in a subprocess on a throwaway SQLite file.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"]
STEPS = int(os.environ.get("RLGUARD_BENCH_STEPS", "200000"))
BATCH_STEPS = 500
LATENCY_SAMPLES = 20
RENDER_SAMPLES = 3
CANONICAL_KEYS = (
    "actor/entropy",
    "actor/ppo_kl",
    "actor/kl_loss",
    "actor/pg_clipfrac",
    "actor/pg_clipfrac_lower",
    "critic/score/mean",
    "response_length/mean",
    "response_length/clip_ratio",
    "actor/grad_norm",
    "actor/pg_loss",
)
KEYS = CANONICAL_KEYS + tuple(f"custom/metric_{i:02d}" for i in range(40 - len(CANONICAL_KEYS)))
ALL_DRAWN_JS = """() => {
    const sel = '.panels .js-plotly-plot, .mini-grid .js-plotly-plot';
    const graphs = [...document.querySelectorAll(sel)];
    const drawn = g => g.data && g.data.length > 0 && g.data[0].x.length > 0;
    return graphs.length >= %d && graphs.every(drawn);
}"""


@contextlib.contextmanager
def rlguard_up(database_url: str) -> Iterator[str]:
    """``rlguard up`` in a subprocess; yields its base URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "rlguard", "up", "--port", "0", "--database-url", database_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if "listening on" in line:
                # keep draining its log, or the service blocks once the pipe is full
                threading.Thread(target=process.stdout.read, daemon=True).start()
                yield line.split("listening on ", 1)[1].split()[0]
                break
        else:
            raise RuntimeError("rlguard up did not start")
    finally:
        process.terminate()
        process.wait(timeout=30)


def fill_run(base: str, run_id: str) -> dict[str, Any]:
    """A ``STEPS``-step run with 40 keys, posted as gzip batches of ``BATCH_STEPS`` steps."""
    started = time.perf_counter()
    with httpx.Client(base_url=base, timeout=120) as http:
        http.post("/api/v1/runs", json={"id": run_id, "project": "bench", "name": "long"})
        for start in range(0, STEPS, BATCH_STEPS):
            steps = [
                {
                    "step": s,
                    "time": 1.7e9 + s,
                    "values": {k: math.sin(s / (50 + i)) + i for i, k in enumerate(KEYS)},
                }
                for s in range(start, min(STEPS, start + BATCH_STEPS))
            ]
            body = gzip.compress(json.dumps({"batch_id": f"b{start}", "steps": steps}).encode())
            headers = {"content-encoding": "gzip", "content-type": "application/json"}
            http.post(
                f"/api/v1/runs/{run_id}/batches", content=body, headers=headers
            ).raise_for_status()
    return {"points": STEPS * len(KEYS), "fill_s": round(time.perf_counter() - started, 1)}


def series_sizes(base: str, run_id: str) -> dict[str, int]:
    """Bytes of the API answers the run page asks for on first render."""
    sizes = {}
    with httpx.Client(base_url=base, timeout=60) as http:
        for name, keys, points in (
            ("series_panels_bytes", CANONICAL_KEYS, 2000),
            ("series_minis_bytes", KEYS[len(CANONICAL_KEYS) :], 400),
        ):
            params = {"keys": ",".join(keys), "max_points": points, "include_times": "true"}
            answer = http.get(f"/api/v1/runs/{run_id}/series", params=params)
            sizes[name] = len(answer.content)
    return sizes


def first_render(browser: Any, base: str, run_id: str) -> dict[str, Any]:
    times, dash_bytes = [], []
    for _ in range(RENDER_SAMPLES):
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        received: list[int] = []

        def on_response(response: Any, received: list[int] = received) -> None:
            if "_dash-update-component" in response.url:
                with contextlib.suppress(Exception):
                    received.append(len(response.body()))

        page.on("response", on_response)
        started = time.perf_counter()
        page.goto(f"{base}/runs/{run_id}")
        page.wait_for_function(ALL_DRAWN_JS % len(KEYS[len(CANONICAL_KEYS) :]), timeout=60_000)
        times.append(time.perf_counter() - started)
        dash_bytes.append(sum(received))
        page.close()
    return {
        "first_render_s": round(statistics.median(times), 3),
        "first_render_samples_s": [round(t, 3) for t in times],
        "first_render_goal_s": 2.0,
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


def live_latency(browser: Any, base: str, spool: str) -> dict[str, Any]:
    import rlguard

    run = rlguard.init(project="bench", name="live", url=base, spool_dir=spool, gpu=False)
    run.log({"actor/entropy": 1.0}, step=0)
    run.flush()
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    page.goto(f"{base}/runs/{run.id}")
    page.wait_for_function("document.querySelectorAll('.panels .js-plotly-plot').length > 0")
    page.evaluate(WATCH_JS)
    latencies = []
    for step in range(1, LATENCY_SAMPLES + 1):
        time.sleep(random.uniform(0.0, 1.0))  # de-phase from the sender's and page's timers
        logged = time.time()
        run.log({"actor/entropy": 1.0 / (1 + step)}, step=step)
        page.wait_for_function(f"window.__seen[{step}] !== undefined", timeout=30_000)
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


def main() -> None:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'bench.db'}"
        with rlguard_up(url) as base, sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            result: dict[str, Any] = {"benchmark": "dashboard", "steps": STEPS, "keys": len(KEYS)}
            result.update(live_latency(browser, base, folder))
            result.update(fill_run(base, "bench-long"))
            result.update(series_sizes(base, "bench-long"))
            result.update(first_render(browser, base, "bench-long"))
            browser.close()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
