"""The hook's cost: ``run.log()`` on the training thread, and its whole CPU per logged step.

``log()`` (the default): each case timed per call with ``perf_counter_ns`` over ``--steps`` steps
of 20 metrics (median, p99, in µs; the timer's own cost, measured the same way, is reported as
``timer_floor``): ``queue_put`` (the floor: a bare ``SimpleQueue.put`` of the same dict),
``tensorboard`` (20 × ``SummaryWriter.add_scalar``), ``rlguard_floats`` and ``rlguard_tensors``
(20 0-d torch tensors), with a real service up (started here on a temporary SQLite file).

``cpu``: the hook's whole CPU per logged step (the training thread's ``log()`` and the sender
thread's conversion, encoding and posting): the process CPU time of a loop over ``--cpu-steps``
steps of 20 full-precision floats with ``log()`` and ``finish()``, minus the same loop's without
them, against ``rlguard server`` in a subprocess (its CPU is not ours). Two loops: ``tight``
(nothing but logging: the sender's largest batches) and ``paced`` (a 1 ms sleep a step, as a
fast trainer: smaller batches and cold caches, a tenth of the steps). ``floor``: the same loop
copying each step's dict onto a deque, the least any logging call costs there;
``training_thread``: the ``log()`` thread's own share. Rounds alternate the three; medians.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import queue
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for folder in ("trainer_hook", "backend", "frontend"):
    sys.path.insert(0, str(ROOT / folder))

from benchmarks._support import service, sqlite_url  # noqa: E402

KEYS = 20
PACED_STEP_S = 0.001


def measure(step_fn: Callable[[int], None], steps: int) -> dict[str, float]:
    """Median and p99 cost of ``step_fn`` per call over ``steps`` calls, in microseconds."""
    costs = []
    clock = time.perf_counter_ns
    for step in range(steps):
        started = clock()
        step_fn(step)
        costs.append(clock() - started)
    costs.sort()
    return {
        "median_us": statistics.median(costs) / 1000,
        "p99_us": costs[int(0.99 * (steps - 1))] / 1000,
    }


def log_costs(steps: int, tmp: Path) -> dict[str, object]:
    """``log()`` per call beside a bare queue put and TensorBoard, in one process."""
    import torch
    from torch.utils.tensorboard import SummaryWriter

    import rlguard
    from rlguard_backend.core.app import create_app
    from rlguard_backend.core.config import Settings
    from rlguard_backend.core.serve import ServerThread

    floats = {f"actor/metric_{i}": 0.001 * i for i in range(KEYS)}
    tensors = {key: torch.tensor(value) for key, value in floats.items()}
    results: dict[str, object] = {"steps": steps, "keys": KEYS}
    results["timer_floor"] = measure(lambda step: None, steps)
    bare: queue.SimpleQueue[object] = queue.SimpleQueue()
    results["queue_put"] = measure(lambda step: bare.put(floats), steps)

    writer = SummaryWriter(str(tmp / "tb"))

    def tensorboard_step(step: int) -> None:
        for key, value in floats.items():
            writer.add_scalar(key, value, step)

    results["tensorboard"] = measure(tensorboard_step, steps)
    writer.close()

    app = create_app(Settings(database_url=f"sqlite:///{tmp / 'rlguard.db'}"))
    with ServerThread(app) as server:
        for case, metrics in (("rlguard_floats", floats), ("rlguard_tensors", tensors)):
            run = rlguard.init(
                project="bench", url=server.url, spool_dir=str(tmp / "spool"), gpu=False
            )
            results[case] = measure(lambda step, r=run, m=metrics: r.log(m, step=step), steps)
            status = run.finish(timeout_s=120)
            results[case]["delivered_points"] = status.sent + status.replayed  # type: ignore[index]
    app.state.engine.dispose()

    put = results["queue_put"]["median_us"]  # type: ignore[index]
    ours = results["rlguard_floats"]["median_us"]  # type: ignore[index]
    tb = results["tensorboard"]["median_us"]  # type: ignore[index]
    results["tensorboard_over_rlguard_floats"] = round(tb / ours, 1)
    results["rlguard_floats_over_queue_put"] = round(ours / put, 1)
    return results


def metric_rows(count: int = 64) -> list[dict[str, float]]:
    """Distinct steps of 20 full-precision floats, as a trainer logs them (not round numbers)."""
    rng = random.Random(0)
    return [{f"actor/metric_{i}": rng.random() for i in range(KEYS)} for _ in range(count)]


def cpu_of_loop(
    logger: str, url: str, steps: int, pause_s: float, tmp: Path
) -> tuple[float, float]:
    """Process and training-thread CPU seconds of one loop; ``logger`` is ``"none"``,
    ``"floor"`` (each step's dict copied onto a deque: the least any logging call costs) or
    ``"rlguard"`` (``run.log()`` into ``url``, then ``finish()``)."""
    import rlguard

    rows = metric_rows()
    run = None
    log: Callable[[int, dict[str, float]], object] | None = None
    if logger == "rlguard":
        run = rlguard.init(project="bench", url=url, spool_dir=str(tmp / "spool"), gpu=False)
        log = lambda step, values: run.log(values, step=step)  # noqa: E731
    elif logger == "floor":
        floor: collections.deque[object] = collections.deque()
        log = lambda step, values: floor.append((step, time.time(), values.copy()))  # noqa: E731
    process_started, thread_started = time.process_time(), time.thread_time()
    for step in range(steps):
        if pause_s:
            time.sleep(pause_s)
        if log is not None:
            log(step, rows[step % len(rows)])
    if run is not None:
        status = run.finish(timeout_s=300)
        if status.sent != steps * KEYS:
            raise RuntimeError(f"{status.sent} of {steps * KEYS} points delivered: {status}")
    return time.process_time() - process_started, time.thread_time() - thread_started


def cpu_per_step(steps: int, rounds: int, tmp: Path) -> dict[str, object]:
    """The hook's CPU per logged step: logged loops minus unlogged ones, alternating."""
    results: dict[str, object] = {"steps": steps, "keys": KEYS, "rounds": rounds}
    with service(sqlite_url(tmp, "cpu.db")) as url:
        for loop, pause_s, n in (("tight", 0.0, steps), ("paced", PACED_STEP_S, steps // 10)):
            cpu: dict[str, list[float]] = {"none": [], "floor": [], "rlguard": [], "thread": []}
            for _ in range(rounds):
                for logger in ("none", "floor", "rlguard"):
                    process_s, thread_s = cpu_of_loop(logger, url, n, pause_s, tmp)
                    cpu[logger].append(process_s / n * 1e6)
                cpu["thread"].append(thread_s / n * 1e6)
            base_us = statistics.median(cpu["none"])
            results[loop] = {
                "steps": n,
                "unlogged_us_per_step": round(base_us, 3),
                "hook_cpu_us_per_step": round(statistics.median(cpu["rlguard"]) - base_us, 3),
                "training_thread_us_per_step": round(statistics.median(cpu["thread"]) - base_us, 3),
                "floor_us_per_step": round(statistics.median(cpu["floor"]) - base_us, 3),
            }
    return results


def main(argv: list[str] | None = None) -> int:
    """Measure ``log()`` beside its peers and the hook's CPU per step; print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("log", "cpu"), help="run one half")
    parser.add_argument("--steps", type=int, default=20_000, help="log() calls timed per case")
    parser.add_argument("--cpu-steps", type=int, default=100_000, help="steps of the tight loop")
    parser.add_argument("--rounds", type=int, default=3, help="logged/unlogged pairs per loop")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="rlguard-bench-"))
    results: dict[str, object] = {"python": sys.version.split()[0], "cpus": os.cpu_count()}
    if args.only in (None, "log"):
        results["log"] = log_costs(args.steps, tmp)
    if args.only in (None, "cpu"):
        results["cpu"] = cpu_per_step(args.cpu_steps, args.rounds, tmp)
    sys.stdout.write(json.dumps(results) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
