"""The W&B tee's cost on the training thread per ``wandb.log()`` of 20 keys, beside W&B's own.

In one process, W&B offline (its files in a temporary folder) and ``rlguard server`` on a
temporary SQLite file in a subprocess. Per round, alternating:

- ``wandb_alone``: ``wandb.log()`` timed per call in a run with no tee (W&B's own cost);
- ``wandb_with_tee``: the same in a run teed by ``attach()``;
- ``tee``: what the tee adds to each call, timed alone: the patched ``Run.log`` around a no-op
  in place of W&B's, on the teed run (the wrapper, the run's lookup, the step rules and
  ``rlguard``'s ``run.log()``).

Median and p99 per call in µs over ``--steps`` calls, each the median of the rounds'; the
goal: ``tee`` at most 5 % of ``wandb_alone``. ``delivered_points`` checks that the teed runs
reached the service whole. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for folder in ("trainer_hook", "backend", "frontend"):
    sys.path.insert(0, str(ROOT / folder))

from benchmarks._support import service, sqlite_url  # noqa: E402
from benchmarks.hook_overhead import measure  # noqa: E402

KEYS = 20
GOAL_SHARE = 0.05


def one_round(steps: int, rows: list[dict[str, float]]) -> dict[str, Any]:
    """W&B alone, W&B teed, and the tee alone (median and p99 µs of ``steps`` calls each), and
    the points the teed run delivered."""
    import wandb

    from rlguard.integrations import wandb as tee

    costs: dict[str, Any] = {}
    run = wandb.init(project="bench-alone")
    costs["wandb_alone"] = measure(lambda step: wandb.log(rows[step % len(rows)]), steps)
    run.finish()
    tee.attach()
    try:
        run = wandb.init(project="bench-teed")
        costs["wandb_with_tee"] = measure(lambda s: wandb.log(rows[s % len(rows)]), steps)
        teed_log = tee._after("log", tee._tee_log)(lambda self, *args, **kwargs: None)
        costs["tee"] = measure(lambda step: teed_log(run, rows[step % len(rows)]), steps)
        rlguard_run = tee.tee_of(run)
        run.finish()
    finally:
        tee.detach()
    assert rlguard_run is not None
    status = rlguard_run.status()
    costs["delivered_points"] = status.sent + status.replayed
    return costs


def main(argv: list[str] | None = None) -> int:
    """Time ``wandb.log()`` with and without the tee, and the tee alone; print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5_000, help="calls timed per case")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the three cases")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="rlguard-bench-wandb-"))
    os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true", WANDB_ERROR_REPORTING="false")
    os.environ.update(WANDB_DIR=str(tmp), RLGUARD_GPU="0", RLGUARD_SPOOL_DIR=str(tmp / "spool"))
    import wandb

    rows = [{f"actor/metric_{i}": 0.001 * i + step for i in range(KEYS)} for step in range(64)]
    rounds: list[dict[str, Any]] = []
    with service(sqlite_url(tmp, "wandb.db")) as url:
        os.environ["RLGUARD_URL"] = url
        rounds = [one_round(args.steps, rows) for _ in range(args.rounds)]
    wandb.teardown()
    results: dict[str, Any] = {
        "python": sys.version.split()[0],
        "wandb": wandb.__version__,
        "cpus": os.cpu_count(),
        "steps": args.steps,
        "rounds": args.rounds,
        "keys": KEYS,
    }
    for case in ("wandb_alone", "wandb_with_tee", "tee"):
        results[case] = {
            figure: round(statistics.median(r[case][figure] for r in rounds), 3)
            for figure in ("median_us", "p99_us")
        }
    share = results["tee"]["median_us"] / results["wandb_alone"]["median_us"]
    results["tee_share_of_wandb"] = round(share, 4)
    results["goal_share"] = GOAL_SHARE
    results["goal_met"] = share <= GOAL_SHARE
    results["delivered_points"] = sum(r["delivered_points"] for r in rounds)
    results["expected_points"] = 2 * args.rounds * args.steps * KEYS  # teed run + tee alone
    sys.stdout.write(json.dumps(results) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
