"""CPU cost of the stability detectors: per step in DetectorSuite.feed, per batch in the service.

Two synthetic 5,000-step runs of 20 keys each (12 verl keys the detectors read, 8 keys they
do not know, such as ``system/gpu0/util``): a healthy GRPO run and one whose entropy collapses
(so alerts open, update and carry evidence). Each run is fed to a fresh suite REPEATS times;
the figure is the median over repeats of CPU µs per step (process time, so other load on a
shared host inflates it less than wall time would). ``bare_loop`` is the same-run cost of a
loop that only iterates the same dicts, the floor any per-step work sits on.
``async_moe_us_per_step``: the healthy run with four of its unknown keys swapped for an async
MoE run's staleness and routing statistics, so that D11 and D12 run too.
``*_batched_us_per_step``: the same runs in batches of 100 steps through
``DetectorSuite.feed_many`` (what the service does with a batch: feed() for each step).

``*_batch_*`` figures: the same runs in batches of 100 steps through the batch handler's
detector part (``feed.detect_steps`` after the run row's locked read) in its unit of work
(write session, commit) on a real SQLite file; median CPU ms per batch. ``baseline`` is that
transaction (the locked read and the commit) without the detectors (same database, measured
alternately with it); ``detectors`` is the difference, their all-in cost per batch: feed, the
checkpoint's generation read (and the checkpoint, when due), pending step, alert writes.
``cold`` rebuilds the suite from its stored checkpoint every batch (and writes one), as when
batches of one run reach several service processes. ``live_batch_*``: the same for live
batches of 10 steps of 100 keys (the 20 keys and 80 the detectors do not read).
Goal: ``detectors`` small beside what the batch costs the service without them (about 4.5 ms
for 100 steps of 20 keys on the reference VM: benchmarks/ingest.py), so that ingest with the
detectors keeps at least 80 % of its throughput without them: about 1.1 ms all-in.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from benchmarks._support import sqlite_url
from rlguard_backend import ingest
from rlguard_backend.core import migrate
from rlguard_backend.core.config import Settings
from rlguard_backend.core.db import make_engine, make_session_factory, write_session
from rlguard_backend.detection import feed
from rlguard_backend.models import Run as RunRow
from rlguard_backend.models import utcnow
from rlguard_backend.schemas import StepIn
from rlguard_backend.stability import DetectorSuite

STEPS, REPEATS, SEED = 5000, 5, 0
BATCH_STEPS, BATCH_REPEATS = 100, 3
LIVE_STEPS, LIVE_EXTRA_KEYS = 10, 80  # a live batch: 10 steps of 100 keys
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


def make_run(collapsing: bool, steps: int = STEPS, seed: int = SEED, extra_keys: int = 0) -> Run:
    """The run's steps; `extra_keys` more keys per step that the detectors do not read."""
    rng = random.Random(seed)
    extra = [f"system/gpu{i // 10}/metric{i % 10}" for i in range(extra_keys)]
    return [
        (t, {**_step(t, rng, collapsing), **{key: 50.0 + i for i, key in enumerate(extra)}})
        for t in range(steps)
    ]


ASYNC_MOE_KEYS = {  # four of the unknown keys swapped for signals the D11/D12 detectors read
    "system/gpu1/util": "training/off_policy/trajectory_staleness/mean",
    "system/gpu1/mem_gb": "rollout/moe/max_vio/avg",
    "timing_s/gen": "rollout/moe/avg_vio/avg",
    "timing_s/update_actor": "routing_confidence/mean",
}


def with_async_moe(run: Run) -> Run:
    """The run as an async MoE run logs it: staleness and MoE routing statistics among the
    same 20 keys (so the staleness and moe_routing detectors run every step)."""
    rng = random.Random(SEED)
    changed = []
    for t, values in run:
        step = {ASYNC_MOE_KEYS.get(key, key): value for key, value in values.items()}
        step["training/off_policy/trajectory_staleness/mean"] = 1.0
        step["rollout/moe/max_vio/avg"] = 1.2 * math.exp(0.2 * rng.gauss(0, 1))
        step["rollout/moe/avg_vio/avg"] = 0.4 * math.exp(0.2 * rng.gauss(0, 1))
        step["routing_confidence/mean"] = 0.6 + 0.02 * rng.gauss(0, 1)
        changed.append((t, step))
    return changed


def us_per_step(feed_run: Callable[[Run], Any], run: Run) -> float:
    """Median over REPEATS of one whole pass over `run`, in µs per step."""
    samples = []
    for _ in range(REPEATS):
        start = time.process_time()
        feed_run(run)
        samples.append((time.process_time() - start) / len(run) * 1e6)
    return round(statistics.median(samples), 2)


def suite_pass(factory: Callable[[Mapping[str, Any]], Any]) -> Callable[[Run], int]:
    """A pass that feeds a run step by step to a suite made by ``factory``; its event count."""

    def feed_run(run: Run) -> int:
        suite, events = factory(CONFIG), 0
        for step, values in run:
            events += len(suite.feed(step, values))
        return events

    return feed_run


def batched_pass(factory: Callable[[Mapping[str, Any]], Any]) -> Callable[[Run], int]:
    """The run in batches of BATCH_STEPS through feed_many."""

    def feed_run(run: Run) -> int:
        suite, events = factory(CONFIG), 0
        for start in range(0, len(run), BATCH_STEPS):
            events += len(suite.feed_many(run[start : start + BATCH_STEPS]))
        return events

    return feed_run


def bare_pass(run: Run) -> int:
    """The floor: a pass that only walks the run's values."""
    count = 0
    for _step_number, values in run:
        for _key, _value in values.items():
            count += 1
    return count


def _create_run(factory: sessionmaker[Session]) -> str:
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    with write_session(factory) as session:
        now = utcnow()
        session.add(RunRow(id=run_id, project="bench", config=CONFIG, summary={}, created_at=now))
        session.commit()
    return run_id


def _batch_ms(
    factory: sessionmaker[Session],
    settings: Settings,
    run_id: str,
    steps: list[StepIn] | None,
    suites: feed.SuiteCache,
) -> float:
    """CPU ms of one batch's unit of work, with the detectors when `steps` is given.

    As in the batch handler, the run is read with its row locked (ingest.lock_run) and the
    detectors' part is detect_steps; storing the points is left out (benchmarks/ingest.py
    measures it), so the baseline is the locked read and the commit.
    """
    start = time.process_time()
    with write_session(factory) as session:
        last_step, config = ingest.lock_run(session, run_id)
        if steps is not None:
            live = feed.live_suite(session, run_id, config, settings, last_step, suites)
            feed.detect_steps(session, live, steps, settings)
        session.commit()
    return (time.process_time() - start) * 1000


def batch_costs(run: Run, folder: Path, batch_steps: int = BATCH_STEPS) -> dict[str, float]:
    """Median CPU ms per 100-step batch: baseline, with detectors (cached suite and cold)."""
    url = sqlite_url(folder, f"{uuid.uuid4().hex[:8]}.db")
    engine = make_engine(url)
    migrate.upgrade(engine)
    factory, settings = make_session_factory(engine), Settings(database_url=url)
    batches = [
        [StepIn(step=step, values=values) for step, values in run[i : i + batch_steps]]
        for i in range(0, len(run), batch_steps)
    ]
    samples: dict[str, list[float]] = {"baseline": [], "cached": [], "cold": []}
    for _ in range(BATCH_REPEATS):
        run_ids = {variant: _create_run(factory) for variant in samples}
        cached = feed.SuiteCache()
        for batch in batches:  # alternate the variants so drifting load hits all three alike
            baseline = _batch_ms(factory, settings, run_ids["baseline"], None, cached)
            samples["baseline"].append(baseline)
            samples["cached"].append(_batch_ms(factory, settings, run_ids["cached"], batch, cached))
            cold = feed.SuiteCache()  # a process that has not seen this run
            samples["cold"].append(_batch_ms(factory, settings, run_ids["cold"], batch, cold))
    engine.dispose()
    medians = {variant: statistics.median(values) for variant, values in samples.items()}
    return {
        "batch_baseline_ms": round(medians["baseline"], 3),
        "batch_ms": round(medians["cached"], 3),
        "batch_detectors_ms": round(medians["cached"] - medians["baseline"], 3),
        "batch_cold_detectors_ms": round(medians["cold"] - medians["baseline"], 3),
    }


def main() -> None:
    """Measure the detectors' cost per fed step and per live batch and print JSON."""
    result: dict[str, Any] = {"steps": STEPS, "keys_per_step": 20, "repeats": REPEATS}
    feed, batched = suite_pass(DetectorSuite), batched_pass(DetectorSuite)
    with tempfile.TemporaryDirectory() as folder:
        for name, collapsing in (("healthy", False), ("collapsing", True)):
            run = make_run(collapsing)
            result[f"{name}_events"] = feed(run)
            result[f"{name}_us_per_step"] = us_per_step(feed, run)
            result[f"{name}_batched_us_per_step"] = us_per_step(batched, run)
            result[f"{name}_bare_loop_us_per_step"] = us_per_step(bare_pass, run)
            costs = batch_costs(run, Path(folder))
            result.update({f"{name}_{figure}": value for figure, value in costs.items()})
        result["async_moe_us_per_step"] = us_per_step(feed, with_async_moe(make_run(False)))
        live = make_run(False, steps=2000, extra_keys=LIVE_EXTRA_KEYS)
        costs = batch_costs(live, Path(folder), LIVE_STEPS)
        result.update({f"live_{figure}": value for figure, value in costs.items()})
    result["batch_steps"], result["live_batch_steps"] = BATCH_STEPS, LIVE_STEPS
    result["time"] = time.strftime("%FT%T")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
