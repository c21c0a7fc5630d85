"""CPU cost of DetectorSuite.feed per step; prints one JSON object.

Two synthetic 5,000-step runs of 20 keys each (12 verl keys the detectors read, 8 keys they
do not know, such as ``system/gpu0/util``): a healthy GRPO run and one whose entropy collapses
(so alerts open, update and carry evidence). Each run is fed to a fresh suite REPEATS times;
the figure is the median over repeats of CPU µs per step (process time, so other load on a
shared host inflates it less than wall time would). ``bare_loop`` is the same-run cost of a
loop that only iterates the same dicts, the floor any per-step work sits on.
Goal: ``feed`` at most ~30-40 µs per step (20 % of ingest throughput).
"""

from __future__ import annotations

import json
import math
import random
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

from rlguard_backend.stability import DetectorSuite

STEPS, REPEATS, SEED = 5000, 5, 0
CONFIG = {
    "updates_per_batch": 4,
    "kl_placement": "loss",
    "kl_estimator": "k3",
    "kl_coef": 0.001,
    "ppo_kl_target": 0.01,
    "reward_min": 0.0,
    "reward_max": 1.0,
    "planned_steps": STEPS,
}
Run = list[tuple[int, dict[str, float]]]


def _step(t: int, rng: random.Random, collapsing: bool) -> dict[str, float]:
    e = rng.gauss
    entropy = 0.25 + 0.30 * math.exp(-t / 800) + 0.01 * e(0, 1)
    reward = 0.2 + 0.6 * (1 - math.exp(-t / 600)) + 0.03 * e(0, 1)
    zero_std = 0.15 + 0.25 * (1 - math.exp(-t / 1000)) + 0.03 * e(0, 1)
    length = 300 + 0.02 * t + 10 * e(0, 1)
    if collapsing:
        entropy = 0.6 * math.exp(-t / 150) + 0.03 + 0.01 * e(0, 1)
        reward = 0.15 + 0.02 * (1 - math.exp(-t / 200)) + 0.03 * e(0, 1)
        zero_std = 0.4 + 0.55 * (1 - math.exp(-t / 150)) + 0.03 * e(0, 1)
        length = max(1.0, 50 * math.exp(-t / 100) + 4 + e(0, 1))
    return {
        "actor/entropy": entropy,
        "critic/score/mean": reward,
        "actor/kl_loss": max(0.0, 0.004 * (1 - math.exp(-t / 1000)) + 3e-4 * e(0, 1)),
        "actor/kl_coef": 0.001,
        "actor/ppo_kl": 1e-4 * math.exp(0.5 * e(0, 1)),
        "actor/pg_clipfrac": 0.002 * math.exp(0.3 * e(0, 1)),
        "actor/pg_clipfrac_lower": 0.0,
        "actor/grad_norm": 0.5 * math.exp(0.2 * e(0, 1)),
        "frac_reward_zero_std": min(1.0, max(0.0, zero_std)),
        "response_length/mean": length,
        "response_length/clip_ratio": min(1.0, max(0.0, 0.01 + 0.005 * e(0, 1))),
        "actor/pg_loss": 0.01 * e(0, 1),
        "system/gpu0/util": 90 + 5 * e(0, 1),
        "system/gpu1/util": 90 + 5 * e(0, 1),
        "system/gpu0/mem_gb": 60 + e(0, 1),
        "system/gpu1/mem_gb": 60 + e(0, 1),
        "timing_s/gen": 20 + e(0, 1),
        "timing_s/update_actor": 10 + e(0, 1),
        "perf/throughput": 1500 + 50 * e(0, 1),
        "perf/max_memory_allocated_gb": 70 + e(0, 1),
    }


def make_run(collapsing: bool, steps: int = STEPS, seed: int = SEED) -> Run:
    rng = random.Random(seed)
    return [(t, _step(t, rng, collapsing)) for t in range(steps)]


def us_per_step(feed_run: Callable[[Run], Any], run: Run) -> float:
    """Median over REPEATS of one whole pass over `run`, in µs per step."""
    samples = []
    for _ in range(REPEATS):
        start = time.process_time()
        feed_run(run)
        samples.append((time.process_time() - start) / len(run) * 1e6)
    return round(statistics.median(samples), 2)


def suite_pass(factory: Callable[[Mapping[str, Any]], Any]) -> Callable[[Run], int]:
    def feed_run(run: Run) -> int:
        suite, events = factory(CONFIG), 0
        for step, values in run:
            events += len(suite.feed(step, values))
        return events

    return feed_run


def bare_pass(run: Run) -> int:
    count = 0
    for _step_number, values in run:
        for _key, _value in values.items():
            count += 1
    return count


def main() -> None:
    result: dict[str, Any] = {"steps": STEPS, "keys_per_step": 20, "repeats": REPEATS}
    feed = suite_pass(DetectorSuite)
    for name, collapsing in (("healthy", False), ("collapsing", True)):
        run = make_run(collapsing)
        result[f"{name}_events"] = feed(run)
        result[f"{name}_us_per_step"] = us_per_step(feed, run)
        result[f"{name}_bare_loop_us_per_step"] = us_per_step(bare_pass, run)
    result["time"] = time.strftime("%FT%T")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
