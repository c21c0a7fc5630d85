"""Cost of ``run.log()`` in the training thread, against same-run baselines; prints one JSON object.

Each case is timed per call with ``perf_counter_ns`` over 20,000 steps of 20 metrics (median, p99,
in µs; the timer's own cost, measured the same way, is reported as ``timer_floor``):
``queue_put`` (the floor: a bare ``SimpleQueue.put`` of the same dict), ``tensorboard`` (20 ×
``SummaryWriter.add_scalar``), ``rlguard_floats`` and ``rlguard_tensors`` (20 0-d torch tensors),
with a real service up (started here on a temporary SQLite file).
"""

from __future__ import annotations

import json
import os
import queue
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for folder in ("trainer_hook", "backend", "frontend"):
    sys.path.insert(0, str(ROOT / folder))

STEPS = 20_000
KEYS = 20


def measure(step_fn: Callable[[int], None]) -> dict[str, float]:
    costs = []
    clock = time.perf_counter_ns
    for step in range(STEPS):
        started = clock()
        step_fn(step)
        costs.append(clock() - started)
    costs.sort()
    return {"median_us": statistics.median(costs) / 1000, "p99_us": costs[int(0.99 * STEPS)] / 1000}


def main() -> int:
    import torch
    from torch.utils.tensorboard import SummaryWriter

    import rlguard
    from rlguard_backend.config import Settings
    from rlguard_backend.main import create_app
    from rlguard_backend.serve import ServerThread

    tmp = Path(tempfile.mkdtemp(prefix="rlguard-bench-"))
    floats = {f"actor/metric_{i}": 0.001 * i for i in range(KEYS)}
    tensors = {key: torch.tensor(value) for key, value in floats.items()}
    results: dict[str, object] = {
        "steps": STEPS,
        "keys": KEYS,
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
    }
    results["timer_floor"] = measure(lambda step: None)
    bare: queue.SimpleQueue[object] = queue.SimpleQueue()
    results["queue_put"] = measure(lambda step: bare.put(floats))

    writer = SummaryWriter(str(tmp / "tb"))

    def tensorboard_step(step: int) -> None:
        for key, value in floats.items():
            writer.add_scalar(key, value, step)

    results["tensorboard"] = measure(tensorboard_step)
    writer.close()

    app = create_app(Settings(database_url=f"sqlite:///{tmp / 'rlguard.db'}"))
    with ServerThread(app) as server:
        for case, metrics in (("rlguard_floats", floats), ("rlguard_tensors", tensors)):
            run = rlguard.init(
                project="bench", url=server.url, spool_dir=str(tmp / "spool"), gpu=False
            )
            results[case] = measure(lambda step, r=run, m=metrics: r.log(m, step=step))
            status = run.finish(timeout_s=120)
            results[case]["delivered_points"] = status.sent + status.replayed  # type: ignore[index]
    app.state.engine.dispose()

    put = results["queue_put"]["median_us"]  # type: ignore[index]
    ours = results["rlguard_floats"]["median_us"]  # type: ignore[index]
    tb = results["tensorboard"]["median_us"]  # type: ignore[index]
    results["tensorboard_over_rlguard_floats"] = round(tb / ours, 1)
    results["rlguard_floats_over_queue_put"] = round(ours / put, 1)
    sys.stdout.write(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
