"""Time from ``POST /runs/{id}/stop`` to ``run.should_stop`` in the trainer, two trainer paces.

A trainer thread logs every ``--fast-s`` seconds (a batch reply brings the command) or every
``--slow-s`` seconds (the hook's idle poll, every ``command_poll_s`` = 5 s, brings it) into
``rlguard server`` on a temporary SQLite file; the stop is asked at a random moment between two
logs. The baseline measured in the same run is the floor of the fast path: a logged point's
round trip (``log`` then ``flush`` returning) on the same service. Goals: ≤ 2 s at a log a
second, ≤ 10 s at a log a minute.

    python -m benchmarks.stop_latency [--trials 5] [--fast-s 1] [--slow-s 60]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import rlguard
from benchmarks._support import service, sqlite_url

GOALS_S = {"fast": 2.0, "slow": 10.0}


def one_stop(url: str, pace_s: float, trial: int) -> float:
    """Seconds from the stop's POST to ``should_stop``, for a trainer logging every ``pace_s``."""
    run = rlguard.init(project="bench-stop", run_id=f"stop-{pace_s:g}-{trial}", url=url, gpu=False)
    done = threading.Event()

    def train() -> None:
        step = 0
        while not run.should_stop and not done.is_set():
            run.log({"actor/entropy": 1.0, "actor/ppo_kl": 0.001}, step=step)
            step += 1
            done.wait(pace_s)

    trainer = threading.Thread(target=train)
    trainer.start()
    assert run.flush(30)
    time.sleep(random.uniform(0, pace_s))  # a random moment between two logs
    asked = time.perf_counter()
    request = urllib.request.Request(f"{url}/api/v1/runs/{run.id}/stop", b"{}", method="POST")
    request.add_header("Content-Type", "application/json")
    urllib.request.urlopen(request, timeout=30).read()
    while not run.should_stop:
        time.sleep(0.01)
    latency = time.perf_counter() - asked
    done.set()
    trainer.join()
    run.finish()
    return latency


def round_trip_s(url: str, trials: int) -> list[float]:
    """The floor: one logged point delivered (``flush`` returns once the service answered)."""
    run = rlguard.init(project="bench-stop", run_id="stop-floor", url=url, gpu=False)
    times = []
    for step in range(trials):
        started = time.perf_counter()
        run.log({"actor/entropy": 1.0}, step=step)
        assert run.flush(30)
        times.append(time.perf_counter() - started)
    run.finish()
    return times


def summary(samples: list[float]) -> dict[str, float]:
    """Median and worst of ``samples`` in seconds."""
    return {
        "median_s": round(statistics.median(samples), 3),
        "max_s": round(max(samples), 3),
        "n": len(samples),
    }


def main() -> None:
    """Measure both paces and the floor; print one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--fast-s", type=float, default=1.0)
    parser.add_argument("--slow-s", type=float, default=60.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, service(sqlite_url(Path(folder), "s.db")) as url:
        floor = round_trip_s(url, args.trials)
        result: dict[str, dict[str, float]] = {"round_trip_floor": summary(floor)}
        for pace, every in (("fast", args.fast_s), ("slow", args.slow_s)):
            samples = [one_stop(url, every, trial) for trial in range(args.trials)]
            result[pace] = {
                **summary(samples),
                "logs_every_s": every,
                "goal_s": GOALS_S[pace],
                "goal_met": max(samples) <= GOALS_S[pace],
            }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
