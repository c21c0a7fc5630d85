"""Ingest throughput through real HTTP (one uvicorn worker) vs raw inserts of the same rows.

Batches of 100 steps x 20 keys, gzip-encoded before the clock starts, sent by two keep-alive
client threads. The baseline writes the same rows into the same table and primary key with a
plain ``executemany`` (SQLite) or ``executemany`` and ``COPY`` (PostgreSQL) in the same run.
Prints one JSON object.

    python -m benchmarks.ingest [--batches 300] [--no-postgres]
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import math
import sqlite3
import tempfile
import threading
import time
import urllib.parse
import uuid
from pathlib import Path

import httpx

from benchmarks._support import postgres_database, service, sqlite_url

STEPS_PER_BATCH = 100
KEYS = 20
CLIENT_THREADS = 2
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


def make_batches(count: int) -> list[list[dict]]:
    now = time.time()
    return [
        [
            {"step": s, "time": now + s, "values": step_values(s)}
            for s in range(b * STEPS_PER_BATCH, (b + 1) * STEPS_PER_BATCH)
        ]
        for b in range(count)
    ]


def raw_rows(batches: list[list[dict]]) -> list[list[tuple]]:
    return [
        [
            (j + 1, step["step"], value, step["time"])
            for step in batch
            for j, value in enumerate(step["values"].values())
        ]
        for batch in batches
    ]


def http_ingest(url: str, batches: list[list[dict]]) -> float:
    """Points per second through the API."""
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    httpx.post(
        f"{url}/api/v1/runs", json={"id": run_id, "project": "bench"}, timeout=30
    ).raise_for_status()
    bodies = [
        gzip.compress(json.dumps({"batch_id": f"b{i}", "steps": b}).encode(), 1)
        for i, b in enumerate(batches)
    ]
    warmup, timed = bodies[:5], bodies[5:]
    headers = {"content-encoding": "gzip", "content-type": "application/json"}
    with httpx.Client(base_url=url, timeout=60) as client:
        for body in warmup:
            client.post(
                f"/api/v1/runs/{run_id}/batches", content=body, headers=headers
            ).raise_for_status()
    errors: list[str] = []

    def send(share: list[bytes]) -> None:
        # http.client, as the hook itself posts: the client's own CPU is not what is measured.
        parsed = urllib.parse.urlsplit(url)
        connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)
        try:
            for body in share:
                connection.request("POST", f"/api/v1/runs/{run_id}/batches", body, headers)
                response = connection.getresponse()
                answer = response.read()
                if response.status != 200:
                    errors.append(answer.decode())
        finally:
            connection.close()

    threads = [
        threading.Thread(target=send, args=(timed[i::CLIENT_THREADS],))
        for i in range(CLIENT_THREADS)
    ]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(errors[0])
    return len(timed) * STEPS_PER_BATCH * KEYS / elapsed


def sqlite_baseline(path: Path, rows: list[list[tuple]]) -> float:
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")
    connection.execute(POINTS_DDL + " WITHOUT ROWID")
    started = time.perf_counter()
    for batch in rows[5:]:
        connection.execute("BEGIN")
        connection.executemany("INSERT INTO points VALUES (?, ?, ?, ?)", batch)
        connection.execute("COMMIT")
    elapsed = time.perf_counter() - started
    connection.close()
    return sum(len(b) for b in rows[5:]) / elapsed


def postgres_baselines(url: str, rows: list[list[tuple]]) -> dict[str, float]:
    import psycopg

    results = {}
    with psycopg.connect(url) as connection:
        connection.execute(POINTS_DDL)
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
            results[label] = sum(len(b) for b in rows[5:]) / (time.perf_counter() - started)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    batches = make_batches(args.batches + 5)
    rows = raw_rows(batches)
    result: dict[str, object] = {
        "benchmark": "ingest",
        "steps_per_batch": STEPS_PER_BATCH,
        "keys": KEYS,
        "timed_points": args.batches * STEPS_PER_BATCH * KEYS,
        "client_threads": CLIENT_THREADS,
    }
    with tempfile.TemporaryDirectory() as folder:
        baseline = sqlite_baseline(Path(folder) / "raw.db", rows)
        detectors_off = ("RLGUARD_DETECTORS_ENABLED", "false")
        with service(sqlite_url(Path(folder), "off.db"), detectors_off) as url:
            api_off = http_ingest(url, batches)
        with service(sqlite_url(Path(folder), "svc.db")) as url:
            api = http_ingest(url, batches)
        result["sqlite"] = {
            "api_points_per_s": round(api),
            "api_points_per_s_detectors_off": round(api_off),
            "detector_cost": round(1 - api / api_off, 3),
            "raw_executemany_points_per_s": round(baseline),
            "ratio_to_raw": round(api / baseline, 3),
            "ratio_to_raw_detectors_off": round(api_off / baseline, 3),
        }
    if not args.no_postgres:
        with postgres_database() as raw_url:
            pg_base = postgres_baselines(raw_url, rows)
        with postgres_database() as svc_url, service(svc_url) as url:
            api = http_ingest(url, batches)
        result["postgres"] = {
            "api_points_per_s": round(api),
            "raw_executemany_points_per_s": round(pg_base["executemany"]),
            "raw_copy_points_per_s": round(pg_base["copy"]),
            "ratio_to_raw_executemany": round(api / pg_base["executemany"], 3),
            "ratio_to_raw_copy": round(api / pg_base["copy"], 3),
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
