"""Ingest throughput through real HTTP (one uvicorn worker) vs raw inserts of the same points.

Three batch shapes, each gzip-encoded before the clock starts and sent by two keep-alive client
threads, one run each (each run's batches in step order, as a hook sends them):
- ``bulk`` (the figures under ``sqlite`` / ``postgres``): 100 steps x 20 keys per batch, a small
  batch of many steps (the hardest case for the detectors, whose cost is partly per batch);
- ``catchup`` (under ``sqlite_catchup`` / ``postgres_catchup``): 1,000 steps x 20 keys, the
  20,000-point batches the hook sends when it has fallen behind (its ``max_batch_points``), as
  after an outage or from ``rlguard import``;
- ``live`` (under ``sqlite_live`` / ``postgres_live``): 1 step x 100 keys per batch, as the hook
  sends a training run's steps (it flushes every 0.5 s; an RL step takes seconds): verl's
  actor, critic, length, timing and perf metrics with GPU and system statistics of 8 GPUs
  (``--live-steps 10``: ten such steps per batch, a trainer logging faster than it flushes).
The service runs with detectors off and on; the two alternate over ROUNDS rounds and each figure
is the median round, so load from elsewhere on a shared machine hits both alike.

Baselines in the same run, with plain sqlite3 / psycopg and no service around them:
- ``raw_executemany``: the same points as one row each, (key_id, step, value, wall_time) with
  primary key (key_id, step), inserted with ``executemany`` (and ``COPY`` on PostgreSQL), one
  transaction per batch: what the plain one-row-per-point design costs;
- ``raw_chunks``: the same points packed as rlguard stores them (one row per key per batch,
  three arrays), inserted with ``executemany``: the floor of rlguard's own layout.
Prints one JSON object.

    python -m benchmarks.ingest [--batches 300] [--rounds 3] [--no-postgres] [--shape all]
                                [--live-steps 1]

``--batches`` counts bulk batches; the other shapes send as many points (a tenth as many
catch-up batches, 20x as many live ones). ``--shape both`` is bulk and live.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import math
import sqlite3
import statistics
import tempfile
import threading
import time
import urllib.parse
import uuid
from array import array
from pathlib import Path

import httpx

from benchmarks._support import postgres_database, service, sqlite_url

STEPS_PER_BATCH = 100  # bulk shape
CATCHUP_STEPS_PER_BATCH = 1000  # the hook's max_batch_points (20,000) of 20-key steps
LIVE_KEYS = 100  # live shape: one step per batch
CLIENT_THREADS = 2
ROUNDS = 3
CHUNKS_DDL = (
    "CREATE TABLE chunks (key_id INTEGER NOT NULL, first_step BIGINT NOT NULL, "
    "last_step BIGINT NOT NULL, count INTEGER NOT NULL, step_data {blob} NOT NULL, "
    "value_data {blob} NOT NULL, time_data {blob} NOT NULL, PRIMARY KEY (key_id, first_step))"
)
POINTS_DDL = (
    "CREATE TABLE points (key_id INTEGER NOT NULL, step BIGINT NOT NULL, value DOUBLE PRECISION, "
    "wall_time DOUBLE PRECISION, PRIMARY KEY (key_id, step))"
)


# What a verl GRPO step logs (the detectors read the first eleven), plus system metrics.
KEY_NAMES = (
    "actor/entropy",
    "actor/ppo_kl",
    "actor/pg_clipfrac",
    "actor/pg_clipfrac_lower",
    "actor/kl_loss",
    "actor/kl_coef",
    "actor/grad_norm",
    "actor/pg_loss",
    "critic/score/mean",
    "response_length/mean",
    "response_length/clip_ratio",
    "actor/lr",
    "timing_s/step",
    "system/gpu0/util",
    "system/gpu0/memory_used_gb",
    "system/gpu0/power_w",
    "system/gpu0/temperature_c",
    "system/gpu0/sm_clock_mhz",
    "system/cpu_percent",
    "system/memory_used_gb",
)
# What the live shape adds (names as verl and the hook log them), up to LIVE_KEYS per step.
GPU_FIELDS = (
    "util",
    "memory_util",
    "memory_used_gb",
    "power_w",
    "temperature_c",
    "sm_clock_mhz",
    "memory_clock_mhz",
)
VERL_EXTRA = (
    *(
        f"critic/{name}/{stat}"
        for name in ("score", "rewards", "advantages", "returns")
        for stat in ("max", "min")
    ),
    "critic/rewards/mean",
    "critic/advantages/mean",
    "critic/returns/mean",
    "response_length/max",
    "response_length/min",
    "prompt_length/mean",
    "prompt_length/max",
    "prompt_length/min",
    "prompt_length/clip_ratio",
    "timing_s/gen",
    "timing_s/ref",
    "timing_s/old_log_prob",
    "timing_s/adv",
    "timing_s/update_actor",
    "timing_per_token_ms/gen",
    "timing_per_token_ms/update_actor",
    "perf/mfu/actor",
    "perf/max_memory_allocated_gb",
    "perf/max_memory_reserved_gb",
    "perf/cpu_memory_used_gb",
    "perf/total_num_tokens",
    "perf/time_per_step",
    "perf/throughput",
    "training/global_step",
    "training/epoch",
)
LIVE_KEY_NAMES = (
    KEY_NAMES
    + VERL_EXTRA
    + tuple(f"system/gpu{gpu}/{field}" for gpu in range(1, 8) for field in GPU_FIELDS)
)[:LIVE_KEYS]


def step_values(step: int) -> dict[str, float]:
    """A healthy-looking step: slow entropy decline, small KL, rising reward, some noise."""
    wobble = math.sin(step * 0.37)
    values = {name: 50.0 + 5.0 * math.sin(step * 0.11 + i) for i, name in enumerate(KEY_NAMES)}
    values.update(
        {
            "actor/entropy": 1.2 * math.exp(-step / 20000) + 0.02 * wobble,
            "actor/ppo_kl": 0.002 + 0.001 * wobble,
            "actor/pg_clipfrac": 0.02 + 0.005 * wobble,
            "actor/pg_clipfrac_lower": 0.0,
            "actor/kl_loss": 0.01 + 0.002 * wobble,
            "actor/kl_coef": 0.001,
            "actor/grad_norm": 0.5 + 0.1 * wobble,
            "critic/score/mean": 0.3 + 0.4 * (1 - math.exp(-step / 5000)) + 0.02 * wobble,
            "response_length/mean": 300 + 20 * wobble,
            "response_length/clip_ratio": 0.01,
        }
    )
    return values


def make_batches(
    count: int, steps_per_batch: int = STEPS_PER_BATCH, extra: tuple[str, ...] = ()
) -> list[list[dict]]:
    """Batches of steps_per_batch steps, each with the 20 KEY_NAMES and the `extra` keys."""
    now = time.time()

    def values(step: int) -> dict[str, float]:
        found = step_values(step)
        found.update((name, 10.0 + math.sin(step * 0.05 + i)) for i, name in enumerate(extra))
        return found

    return [
        [
            {"step": s, "time": now + s, "values": values(s)}
            for s in range(b * steps_per_batch, (b + 1) * steps_per_batch)
        ]
        for b in range(count)
    ]


def raw_rows(batches: list[list[dict]]) -> list[list[tuple]]:
    """The batches as (key id, step, value, time) rows, the shape the raw baselines insert."""
    return [
        [
            (j + 1, step["step"], value, step["time"])
            for step in batch
            for j, value in enumerate(step["values"].values())
        ]
        for batch in batches
    ]


def http_ingest(url: str, batches: list[list[dict]]) -> float:
    """Points per second through the API: one run per client thread, as concurrent trainers.

    Each run's batches go in step order from one connection, as the hook's sender posts them;
    the two runs' requests interleave at the service.
    """
    bodies = [
        gzip.compress(json.dumps({"batch_id": f"b{i}", "steps": b}).encode(), 1)
        for i, b in enumerate(batches)
    ]
    warmup, timed = bodies[:5], bodies[5:]
    share = -(-len(timed) // CLIENT_THREADS)
    shares = [warmup + timed[i * share : (i + 1) * share] for i in range(CLIENT_THREADS)]
    headers = {"content-encoding": "gzip", "content-type": "application/json"}
    run_ids = [f"bench-{uuid.uuid4().hex[:8]}" for _ in shares]
    for run_id in run_ids:
        httpx.post(
            f"{url}/api/v1/runs", json={"id": run_id, "project": "bench"}, timeout=30
        ).raise_for_status()
    errors: list[str] = []
    ready = threading.Barrier(CLIENT_THREADS + 1)

    def send(run_id: str, share: list[bytes]) -> None:
        # http.client, as the hook itself posts: the client's own CPU is not what is measured.
        parsed = urllib.parse.urlsplit(url)
        connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)

        def post(body: bytes) -> None:
            connection.request("POST", f"/api/v1/runs/{run_id}/batches", body, headers)
            response = connection.getresponse()
            answer = response.read()
            if response.status != 200:
                errors.append(answer.decode())

        try:
            for body in share[: len(warmup)]:
                post(body)
            ready.wait()
            for body in share[len(warmup) :]:
                post(body)
        finally:
            connection.close()

    threads = [
        threading.Thread(target=send, args=(run_id, share))
        for run_id, share in zip(run_ids, shares, strict=True)
    ]
    for thread in threads:
        thread.start()
    ready.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(errors[0])
    return sum(len(step["values"]) for batch in batches[5:] for step in batch) / elapsed


def chunk_rows(rows: list[list[tuple]]) -> list[list[tuple]]:
    """The same points packed per key and batch: (key, first, last, count, 3 arrays)."""
    packed = []
    for batch in rows:
        by_key: dict[int, list[tuple]] = {}
        for row in batch:
            by_key.setdefault(row[0], []).append(row)
        packed.append(
            [
                (
                    key_id,
                    points[0][1],
                    points[-1][1],
                    len(points),
                    array("q", [p[1] for p in points]).tobytes(),
                    array("d", [p[2] for p in points]).tobytes(),
                    array("d", [p[3] for p in points]).tobytes(),
                )
                for key_id, points in by_key.items()
            ]
        )
    return packed


def sqlite_baselines(folder: Path, rows: list[list[tuple]]) -> dict[str, float]:
    """Points per second SQLite takes the same rows at without rlguard: the same-run baselines."""
    results = {}
    for label, ddl, insert, data in (
        ("executemany", POINTS_DDL + " WITHOUT ROWID", "INSERT INTO points VALUES (?,?,?,?)", rows),
        (
            "chunks",
            CHUNKS_DDL.format(blob="BLOB"),
            "INSERT INTO chunks VALUES (?,?,?,?,?,?,?)",
            chunk_rows(rows),
        ),
    ):
        connection = sqlite3.connect(
            folder / f"raw-{label}-{uuid.uuid4().hex[:6]}.db", isolation_level=None
        )
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute(ddl)
        started = time.perf_counter()
        for batch in data[5:]:
            connection.execute("BEGIN")
            connection.executemany(insert, batch)
            connection.execute("COMMIT")
        elapsed = time.perf_counter() - started
        connection.close()
        results[label] = sum(len(b) for b in rows[5:]) / elapsed
    return results


def postgres_baselines(url: str, rows: list[list[tuple]]) -> dict[str, float]:
    """Points per second PostgreSQL takes the same rows at without rlguard (executemany, COPY)."""
    import psycopg

    results = {}
    points = sum(len(b) for b in rows[5:])
    with psycopg.connect(url) as connection:
        connection.execute(POINTS_DDL)
        connection.execute(CHUNKS_DDL.format(blob="BYTEA"))
        connection.commit()
        for label in ("executemany", "copy"):
            connection.execute("TRUNCATE points")
            connection.commit()
            started = time.perf_counter()
            with connection.cursor() as cursor:
                for batch in rows[5:]:
                    if label == "executemany":
                        cursor.executemany("INSERT INTO points VALUES (%s, %s, %s, %s)", batch)
                    else:
                        with cursor.copy("COPY points FROM STDIN") as copy:
                            for row in batch:
                                copy.write_row(row)
                    connection.commit()
            results[label] = points / (time.perf_counter() - started)
        packed = chunk_rows(rows)
        started = time.perf_counter()
        with connection.cursor() as cursor:
            for batch in packed[5:]:
                cursor.executemany("INSERT INTO chunks VALUES (%s,%s,%s,%s,%s,%s,%s)", batch)
                connection.commit()
        results["chunks"] = points / (time.perf_counter() - started)
    return results


def service_rates(urls: dict[str, str], batches: list[list[dict]], rounds: int) -> dict[str, float]:
    """Median points/s per service over ``rounds`` alternating rounds."""
    samples: dict[str, list[float]] = {name: [] for name in urls}
    for _ in range(rounds):
        for name, url in urls.items():
            samples[name].append(http_ingest(url, batches))
    return {name: statistics.median(rates) for name, rates in samples.items()}


def figures(api: float, api_off: float, base: dict[str, float]) -> dict[str, float]:
    """The rates to print: the API's, with and without detectors, and each beside a baseline."""
    result = {
        "api_points_per_s": round(api),
        "api_points_per_s_detectors_off": round(api_off),
        "detector_cost": round(1 - api / api_off, 3),
    }
    for label, rate in base.items():
        result[f"raw_{label}_points_per_s"] = round(rate)
    for label, rate in base.items():
        result[f"ratio_to_raw_{label}"] = round(api / rate, 3)
        result[f"ratio_to_raw_{label}_detectors_off"] = round(api_off / rate, 3)
    return result


def shape_figures(
    batches: list[list[dict]], rounds: int, postgres: bool, folder: Path
) -> dict[str, dict[str, float]]:
    """Detectors off vs on through the service, beside the raw baselines, for one batch shape."""
    rows = raw_rows(batches)
    detectors_off = ("RLGUARD_DETECTORS_ENABLED", "false")
    tag = uuid.uuid4().hex[:6]
    results = {}
    base = sqlite_baselines(folder, rows)
    with (
        service(sqlite_url(folder, f"off-{tag}.db"), detectors_off) as off_url,
        service(sqlite_url(folder, f"on-{tag}.db")) as on_url,
    ):
        rates = service_rates({"off": off_url, "on": on_url}, batches, rounds)
    results["sqlite"] = figures(rates["on"], rates["off"], base)
    if postgres:
        with postgres_database() as raw_url:
            pg_base = postgres_baselines(raw_url, rows)
        with (
            postgres_database() as off_db,
            postgres_database() as on_db,
            service(off_db, detectors_off) as off_url,
            service(on_db) as on_url,
        ):
            rates = service_rates({"off": off_url, "on": on_url}, batches, rounds)
        results["postgres"] = figures(rates["on"], rates["off"], pg_base)
    return results


def main() -> None:
    """Measure ingest over HTTP beside the raw-insert baselines and print the figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--live-steps", type=int, default=1, help="steps per live batch")
    parser.add_argument(
        "--shape", choices=("bulk", "catchup", "live", "both", "all"), default="all"
    )
    args = parser.parse_args()
    assert len(LIVE_KEY_NAMES) == LIVE_KEYS
    bulk = make_batches(args.batches + 5)
    catchup_batches = max(1, args.batches * STEPS_PER_BATCH // CATCHUP_STEPS_PER_BATCH)
    catchup = make_batches(catchup_batches + 5, CATCHUP_STEPS_PER_BATCH)
    # As many timed points as the bulk shape: 20x the batches of 100 points (one step each).
    live_points = args.batches * STEPS_PER_BATCH * len(KEY_NAMES)
    live_batches = live_points // (LIVE_KEYS * args.live_steps)
    live = make_batches(live_batches + 5, args.live_steps, LIVE_KEY_NAMES[len(KEY_NAMES) :])
    result: dict[str, object] = {
        "benchmark": "ingest",
        "steps_per_batch": STEPS_PER_BATCH,
        "catchup_steps_per_batch": CATCHUP_STEPS_PER_BATCH,
        "keys": len(KEY_NAMES),
        "live_steps_per_batch": args.live_steps,
        "live_keys": LIVE_KEYS,
        "timed_points_per_round": args.batches * STEPS_PER_BATCH * len(KEY_NAMES),
        "rounds": args.rounds,
        "client_threads": CLIENT_THREADS,
    }
    with tempfile.TemporaryDirectory() as folder:
        shapes = (("bulk", "", bulk), ("catchup", "_catchup", catchup), ("live", "_live", live))
        for name, suffix, batches in shapes:
            chosen = {"all": ("bulk", "catchup", "live"), "both": ("bulk", "live")}
            if name not in chosen.get(args.shape, (args.shape,)):
                continue
            shape = shape_figures(batches, args.rounds, not args.no_postgres, Path(folder))
            result.update({f"{database}{suffix}": found for database, found in shape.items()})
    print(json.dumps(result))


if __name__ == "__main__":
    main()
