"""Rollout samples: the training-thread cost of ``log_samples`` and the service's sample ingest.

``hook``: per step, ``log()`` of 20 floats (the baseline) and ``log_samples()`` of 64 samples of
2 kB each, timed per call in the same run against a real service (median, p99, in µs); with no
training work between the calls the sender may fall behind and the queue drop samples (counted).
``sqlite`` / ``postgres``: batches of 512 such samples POSTed (gzip, as the hook sends them) to
``rlguard server``; samples/s and MB/s of JSON before gzip. ``view``: the samples page's first
render in real headless Chromium for a step of 512 samples, beside one of 8 (median, p99 in
ms). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for folder in ("trainer_hook", "backend", "frontend"):
    sys.path.insert(0, str(ROOT / folder))

from benchmarks._support import POLL_MS, postgres_database, service, sqlite_url, summary_ms  # noqa: E402

SAMPLES_PER_STEP = 64
SAMPLE_TEXT_BYTES = 2000
SAMPLES_PER_BATCH = 512
KEYS = 20


def rollouts(step: int) -> list[dict[str, object]]:
    """64 samples of about 2 kB of text each, rewards spread so the budget has a choice."""
    return [
        {
            "prompt": f"step {step}: what is {i} + {i}? " + "p" * 180,
            "response": "r" * (SAMPLE_TEXT_BYTES - 200),
            "reward": float(i % 7),
            "advantage": (i % 7) / 7 - 0.5,
            "kl": 0.001 * i,
            "length": 450.0,
        }
        for i in range(SAMPLES_PER_STEP)
    ]


def percentiles_us(costs_ns: list[int]) -> dict[str, float]:
    """Median and p99 of nanosecond costs, in microseconds."""
    ordered = sorted(costs_ns)
    return {
        "median_us": round(statistics.median(ordered) / 1000, 3),
        "p99_us": round(ordered[int(0.99 * (len(ordered) - 1))] / 1000, 3),
    }


def timed(call: Callable[[], None], costs: list[int]) -> None:
    """Call ``call`` once and append its cost in nanoseconds to ``costs``."""
    started = time.perf_counter_ns()
    call()
    costs.append(time.perf_counter_ns() - started)


def hook_costs(steps: int, tmp: Path) -> dict[str, object]:
    """``log()`` and ``log_samples()`` per step, in one run against a real service."""
    import rlguard

    metrics = {f"actor/metric_{i}": 0.001 * i for i in range(KEYS)}
    batches = [rollouts(step) for step in range(8)]  # built beforehand: not the hook's cost
    log_costs: list[int] = []
    sample_costs: list[int] = []
    with service(sqlite_url(tmp, "hook.db")) as url:
        run = rlguard.init(project="bench", url=url, spool_dir=str(tmp / "spool"), gpu=False)
        for step in range(steps):
            timed(lambda s=step: run.log(metrics, step=s), log_costs)
            timed(lambda s=step: run.log_samples(batches[s % 8], step=s), sample_costs)
        status = run.finish(timeout_s=300)
    return {
        "steps": steps,
        "log": percentiles_us(log_costs),
        "log_samples": percentiles_us(sample_costs),
        "samples_delivered": status.samples_sent + status.samples_replayed,
        "samples_dropped": status.samples_dropped,  # the queue's byte budget, at full speed
        "log_samples_over_log": round(
            statistics.median(sample_costs) / max(statistics.median(log_costs), 1), 1
        ),
    }


def _post(url: str, path: str, body: bytes, gzipped: bool = False) -> None:
    import urllib.request

    headers = {"Content-Type": "application/json"}
    if gzipped:
        headers["Content-Encoding"] = "gzip"
    request = urllib.request.Request(f"{url}/api/v1{path}", data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=120) as response:
        response.read()


def ingest_rate(database_url: str, batches: int) -> dict[str, float]:
    """Samples/s and MB/s of ``batches`` POSTs of 512 samples, one after another."""
    from rlguard import _samples

    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    per_step = SAMPLES_PER_BATCH // SAMPLES_PER_STEP
    bodies, raw_bytes = [], 0
    for b in range(batches):
        wire = [
            {**sample, "step": b * per_step + s, "index": i}
            for s in range(per_step)
            for i, sample in enumerate(rollouts(b * per_step + s))
        ]
        raw_bytes += len(json.dumps({"batch_id": "x", "samples": wire}).encode())
        bodies.append(_samples.encode_samples(uuid.uuid4().hex, wire))
    with service(database_url) as url:
        _post(url, "/runs", json.dumps({"id": run_id, "project": "bench"}).encode())
        started = time.perf_counter()
        for body in bodies:
            _post(url, f"/runs/{run_id}/samples", body, gzipped=True)
        seconds = time.perf_counter() - started
    return {
        "batches": batches,
        "samples_per_s": round(batches * SAMPLES_PER_BATCH / seconds, 1),
        "mb_per_s": round(raw_bytes / seconds / 1e6, 2),
    }


VIEW_STEPS = {"samples_512": (5, 512), "samples_8": (1, 8)}  # case -> (step, samples)
TOKENS_PER_SAMPLE = 200
VIEW_ROWS = "#samples-grid td[data-dash-column='index']"  # a drawn row's first cell


def _view_samples(step: int, count: int) -> list[dict[str, object]]:
    """Samples as the hook sends them: 2 kB of text and 200 tokens shaded by KL and entropy."""
    return [
        {
            **sample,
            "step": step,
            "index": i,
            "tokens": {
                "text": [f" t{j}" for j in range(TOKENS_PER_SAMPLE)],
                "kl": [0.001 * ((i + j) % 50) for j in range(TOKENS_PER_SAMPLE)],
                "entropy": [0.01 * (j % 90) for j in range(TOKENS_PER_SAMPLE)],
            },
        }
        for i, sample in enumerate((rollouts(step) * (count // SAMPLES_PER_STEP + 1))[:count])
    ]


def view_render(rounds: int, tmp: Path) -> dict[str, object]:
    """The samples page's first render in real headless Chromium: from navigation to the table
    of the step drawn (its caption and every row), for a step of 512 samples and, as the
    same-run baseline, one of 8; a fresh browser context (cold cache) each round."""
    from playwright.sync_api import sync_playwright

    from benchmarks.dashboard import CHROMIUM, CHROMIUM_ARGS, rlguard_up
    from rlguard import _samples

    run_id = f"bench-view-{uuid.uuid4().hex[:8]}"
    times: dict[str, list[float]] = {case: [] for case in VIEW_STEPS}
    rows: dict[str, int] = {}
    with rlguard_up(sqlite_url(tmp, "view.db")) as url:
        _post(url, "/runs", json.dumps({"id": run_id, "project": "bench"}).encode())
        for step, count in VIEW_STEPS.values():
            body = _samples.encode_samples(uuid.uuid4().hex, _view_samples(step, count))
            _post(url, f"/runs/{run_id}/samples", body, gzipped=True)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for _ in range(rounds):
                for case, (step, count) in VIEW_STEPS.items():
                    context = browser.new_context()
                    page = context.new_page()
                    started = time.perf_counter()
                    page.goto(f"{url}/runs/{run_id}/samples?step={step}")
                    page.wait_for_function(
                        f"([step, n]) => document.querySelectorAll({json.dumps(VIEW_ROWS)}).length"
                        " >= n"
                        " && document.querySelector('#samples-tokens .token')"
                        " && document.querySelector('#samples-caption').innerText"
                        ".startsWith(`step ${step}: `)",
                        arg=[step, min(count, 200)],
                        timeout=60_000,
                        polling=POLL_MS,
                    )
                    times[case].append(time.perf_counter() - started)
                    rows[case] = page.locator(VIEW_ROWS).count()
                    context.close()
            browser.close()
    results: dict[str, object] = {
        case: {**summary_ms(times[case]), "rows_drawn": rows[case]} for case in VIEW_STEPS
    }
    big, small = (statistics.median(times[case]) for case in VIEW_STEPS)
    results["samples_512_over_samples_8"] = round(big / small, 2)
    return results


def main(argv: list[str] | None = None) -> int:
    """Measure the samples path (hook cost, ingest, first render), print JSON; the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000, help="hook steps to time")
    parser.add_argument("--batches", type=int, default=40, help="ingest batches per database")
    parser.add_argument("--render-rounds", type=int, default=5, help="samples page renders")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="rlguard-bench-samples-"))
    results: dict[str, object] = {"hook": hook_costs(args.steps, tmp)}
    results["sqlite"] = ingest_rate(sqlite_url(tmp, "ingest.db"), args.batches)
    with postgres_database() as pg_url:
        results["postgres"] = ingest_rate(pg_url, args.batches)
    results["view"] = view_render(args.render_rounds, tmp)
    sys.stdout.write(json.dumps(results) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
