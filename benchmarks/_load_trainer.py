"""One trainer of the load benchmark: the real hook, sleeping where a trainer would train.

    python -m benchmarks._load_trainer URL RUN_ID START_AT SECONDS STEPS_PER_S KEYS SPOOL_DIR \
        [SAMPLES]

Waits until the wall clock reads START_AT (so every trainer of a level starts at once), logs
KEYS metrics (and SAMPLES rollout samples of ~1 kB, default none) per step at STEPS_PER_S for
SECONDS, finishes the run (replaying any spool) and prints one JSON line: the hook's counters
and the time each batch post took.
Only the standard library and the hook are imported, as in a trainer process.
"""

from __future__ import annotations

import faulthandler
import json
import sys
import time
from typing import Any

import rlguard
from rlguard import _transport

FINISH_TIMEOUT_S = 300.0
posts: list[tuple[float, bool]] = []  # (seconds, answered 2xx)


def _timed_post_batch(original: Any) -> Any:
    """Times the hook's own batch posts (the request is sent as before)."""

    def post_batch(self: Any, run_id: str, body: bytes) -> Any:
        started = time.perf_counter()
        ok = False
        try:
            answer = original(self, run_id, body)
            ok = True
            return answer
        finally:
            posts.append((time.perf_counter() - started, ok))

    return post_batch


def _samples(step: int, count: int) -> list[dict[str, Any]]:
    return [
        {"prompt": f"step {step} prompt {i} " * 20, "response": "x" * 600, "reward": i / count}
        for i in range(count)
    ]


def main(argv: list[str]) -> int:
    url, run_id, start_at, seconds, rate, keys, spool_dir = argv[:7]
    per_step = int(argv[7]) if len(argv) > 7 else 0
    _transport.Transport.post_batch = _timed_post_batch(_transport.Transport.post_batch)  # type: ignore[method-assign]
    names = [f"load/metric_{k:03d}" for k in range(int(keys))]
    # a trainer stuck past any bound of the hook prints every thread's stack and exits
    faulthandler.dump_traceback_later(float(seconds) + FINISH_TIMEOUT_S + 60, exit=True)
    time.sleep(max(0.0, float(start_at) - time.time()))
    run = rlguard.init(project="load", run_id=run_id, url=url, spool_dir=spool_dir)
    period = 1.0 / float(rate)
    steps = int(float(seconds) * float(rate))
    began = time.monotonic()
    for step in range(steps):
        run.log({name: step * 1e-3 + i for i, name in enumerate(names)}, step=step)
        if per_step:
            run.log_samples(_samples(step, per_step), step=step)
        time.sleep(max(0.0, began + (step + 1) * period - time.monotonic()))
    ended = time.monotonic()
    spooled_before_finish = run.status().spooled
    status = run.finish(timeout_s=FINISH_TIMEOUT_S)
    report = {
        "run_id": run_id,
        "steps": steps,
        "keys": len(names),
        "logging_s": ended - began,
        "delivering_s": time.monotonic() - ended,
        "sent": status.sent,
        "spooled": status.spooled,
        "spooled_before_finish": spooled_before_finish,
        "replayed": status.replayed,
        "dropped": status.dropped + status.dropped_steps,
        "dead_lettered": status.dead_lettered,
        "spool_points": status.spool_points,
        "posts_ok_s": [round(s, 6) for s, ok in posts if ok],
        "posts_refused": sum(1 for _, ok in posts if not ok),
    }
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
