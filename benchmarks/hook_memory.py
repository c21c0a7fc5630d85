"""Peak memory of a training process logging 100 keys a step, as fast as it can, with the
service down, beside the same loop unlogged: the hook must stay within ``max_queue_mb`` plus a
small fixed overhead while the spool takes what the queue cannot hold.

Each case runs in a fresh subprocess (peak RSS from ``getrusage``); the unlogged loop is the
baseline measured in the same run. Prints one JSON object.

    python -m benchmarks.hook_memory [--seconds 20] [--budgets 32,256]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile

FIXED_OVERHEAD_MB = 32  # the goal's allowance beyond the budget: imports, threads, buffers

LOOP = """
import os, resource, sys, tempfile, time
import rlguard
seconds, logged = float(sys.argv[1]), sys.argv[2] == "log"
keys = [f"metric/key_{i:03d}" for i in range(100)]
run = rlguard.init(project="memory", url="http://127.0.0.1:9", spool_dir=sys.argv[3],
                   gpu=False) if logged else None
started, step = time.monotonic(), 0
while time.monotonic() - started < seconds:
    values = {key: step * 0.001 + i for i, key in enumerate(keys)}
    if run is not None:
        run.log(values, step=step)
    step += 1
status = run.status() if run is not None else None
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, step,
      status.dropped_steps if status else 0, status.spool_batches if status else 0)
sys.stdout.flush()
os._exit(0)
"""


def peak(seconds: float, mode: str, budget_mb: int) -> dict[str, float]:
    """One loop in a fresh process: peak RSS (MB), steps, dropped steps, spooled batches."""
    with tempfile.TemporaryDirectory() as spool:
        env = {"RLGUARD_MAX_QUEUE_MB": str(budget_mb), "PATH": ""}
        out = subprocess.run(
            [sys.executable, "-c", LOOP, str(seconds), mode, spool],
            capture_output=True,
            text=True,
            timeout=seconds + 120,
            env=env,
            check=True,
        ).stdout.split()
    rss, steps, dropped, spooled = (float(x) for x in out)
    return {
        "peak_rss_mb": round(rss, 1),
        "steps": steps,
        "dropped_steps": dropped,
        "spool_batches": spooled,
    }


def main() -> None:
    """Measure the unlogged loop, then the logged one at each budget; print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--budgets", default="32,256", help="max_queue_mb values, comma-separated")
    args = parser.parse_args()
    bare = peak(args.seconds, "bare", 0)
    result: dict[str, dict[str, float]] = {"unlogged": bare}
    for budget in (int(b) for b in args.budgets.split(",")):
        logged = peak(args.seconds, "log", budget)
        over = logged["peak_rss_mb"] - bare["peak_rss_mb"] - budget
        result[f"logged_{budget}mb"] = {
            **logged,
            "max_queue_mb": budget,
            "over_budget_mb": round(over, 1),
            "goal_met": over <= FIXED_OVERHEAD_MB,
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
