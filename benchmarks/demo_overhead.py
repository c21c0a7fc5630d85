"""Demo GRPO steps per second with logging into a real rlguard service vs no logging.

The same preset and seed run alternately with and without logging (off, on, off, on, off) in
one process against ``rlguard server`` on a temporary SQLite file. A step's time is its training
time plus, when logging, the time spent inside ``run.log()``; the sender thread's work shows up
as slower training steps. Prints one JSON object. Goal: logged within 1 % of unlogged.

    python -m benchmarks.demo_overhead [--steps 60] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

import rlguard
from benchmarks._support import service, sqlite_url
from rlguard.demo import train

PRESET, SEED = "healthy", 0


def steps_per_second(steps: int, run: rlguard.Run | None) -> float:
    """The demo trainer's steps per second, logging to ``run`` (None: not logging)."""
    spent_logging = 0.0

    def log(metrics: dict[str, float], step: int) -> None:
        nonlocal spent_logging
        started = time.perf_counter()
        assert run is not None
        run.log(metrics, step=step)
        spent_logging += time.perf_counter() - started

    result = train(PRESET, steps=steps, seed=SEED, device="cpu", log=log if run else None)
    return steps / (sum(m["timing_s/step"] for m in result.history) + spent_logging)


def main() -> None:
    """Print the demo's training speed with and without the hook, as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    off: list[float] = []
    on: list[float] = []
    with tempfile.TemporaryDirectory() as folder, service(sqlite_url(Path(folder), "d.db")) as url:
        off.append(steps_per_second(args.steps, None))
        for round_ in range(args.rounds):
            run = rlguard.init(
                project="bench",
                name=f"demo-overhead-{round_}",
                url=url,
                gpu=False,
                spool_dir=str(Path(folder) / "spool"),
            )
            on.append(steps_per_second(args.steps, run))
            status = run.finish()
            off.append(steps_per_second(args.steps, None))
        delivered = status.sent
    ratio = statistics.median(on) / statistics.median(off)
    print(
        json.dumps(
            {
                "benchmark": "demo_overhead",
                "preset": PRESET,
                "steps": args.steps,
                "steps_per_s_off_median": round(statistics.median(off), 3),
                "steps_per_s_on_median": round(statistics.median(on), 3),
                "ratio_on_over_off": round(ratio, 4),
                "samples_off": [round(x, 3) for x in off],
                "samples_on": [round(x, 3) for x in on],
                "points_delivered_last_run": delivered,
            }
        )
    )


if __name__ == "__main__":
    main()
