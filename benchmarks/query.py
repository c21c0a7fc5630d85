"""Series query latency: a 1,000,000-point series downsampled to 2,000 points over real HTTP.

Baselines measured in the same run on the same database, on a plain one-row-per-point copy of
the series (``bench_points``, primary key (key_id, step)): fetching the full series raw with
SQL (the data a client would need without server-side downsampling), and a naive SQL
``GROUP BY`` min/max over fixed buckets (what downsampling costs without rollups). Also the full
series decoded from rlguard's own chunks. Prints one JSON object.

    python -m benchmarks.query [--points 1000000] [--repeats 30] [--no-postgres]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from benchmarks._support import postgres_database, sqlite_url
from rlguard_backend import ingest
from rlguard_backend.core import migrate
from rlguard_backend.core.app import create_app
from rlguard_backend.core.config import Settings
from rlguard_backend.core.db import make_engine, make_session_factory, write_session
from rlguard_backend.core.serve import ServerThread
from rlguard_backend.schemas import BatchIn, RunCreate
from rlguard_backend.store import points, repository, sql

RUN_ID = "bench-query"
KEY = "actor/entropy"
CHUNK = 20_000
PLAIN_DDL = (
    "CREATE TABLE bench_points (key_id INTEGER NOT NULL, step BIGINT NOT NULL, "
    "value DOUBLE PRECISION, PRIMARY KEY (key_id, step))"
)
PLAIN_COLUMNS = (("key_id", "int4"), ("step", "int8"), ("value", "float8"))


def fill(url: str, count: int) -> None:
    """Store a noisy decaying series with one spike, through the real ingest path."""
    engine = make_engine(url)
    migrate.upgrade(engine)
    factory = make_session_factory(engine)
    with write_session(factory) as session:
        repository.create_or_resume_run(session, RunCreate(id=RUN_ID, project="bench"))
        session.commit()
    rng = random.Random(0)
    for start in range(0, count, CHUNK):
        steps = [
            {"step": s, "values": {KEY: 2.0 * math.exp(-s / count) + rng.gauss(0, 0.05)}}
            for s in range(start, min(count, start + CHUNK))
        ]
        if start <= count // 2 < start + CHUNK:
            steps[count // 2 - start]["values"][KEY] = 50.0
        with write_session(factory) as session:
            ingest.ingest_batch(
                session, RUN_ID, BatchIn.model_validate({"batch_id": str(start), "steps": steps})
            )
            session.commit()
    engine.dispose()


def timed(fn, repeats: int) -> list[float]:  # type: ignore[no-untyped-def]
    """Wall seconds of ``repeats`` calls of ``fn``."""
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return samples


@contextlib.contextmanager
def served(url: str) -> Iterator[str]:
    """A real service on the database at ``url``, yielding its base URL."""
    app = create_app(Settings(database_url=url))
    with ServerThread(app) as thread:
        yield thread.url
    app.state.engine.dispose()


def measure(url: str, count: int, repeats: int) -> dict[str, object]:
    """Fill a series of ``count`` points and time the downsampled query beside plain fetches."""
    fill(url, count)
    engine = make_engine(url)
    factory = make_session_factory(engine)
    with write_session(factory) as session:
        (key_id,) = sql.fetchall(session, "SELECT id FROM metric_keys WHERE name = ?", (KEY,))[0]
        stored = points.read_points(session, key_id, 0, count)
        assert len(stored) == count
        sql.execute(session, PLAIN_DDL)
        rows = [(key_id, step, value) for step, value, _ in stored]
        sql.bulk_insert(session, "bench_points", PLAIN_COLUMNS, rows)
        session.commit()
    with factory() as session:

        def raw() -> None:
            rows = sql.fetchall(
                session,
                "SELECT step, value FROM bench_points WHERE key_id = ? ORDER BY step",
                (key_id,),
            )
            assert len(rows) == count

        def group_by() -> None:
            width = int(max(1, count // 500))  # an int literal: PostgreSQL groups by expression
            sql.fetchall(
                session,
                f"SELECT step / {width}, min(value), max(value), count(*) FROM bench_points "
                f"WHERE key_id = ? GROUP BY step / {width}",
                (key_id,),
            )

        def chunks() -> None:
            assert len(points.read_points(session, key_id, 0, count)) == count

        raw_s = timed(raw, max(3, repeats // 10))
        group_s = timed(group_by, max(3, repeats // 10))
        chunks_s = timed(chunks, max(3, repeats // 10))
    engine.dispose()
    with served(url) as base, httpx.Client(base_url=base, timeout=60) as http:
        params = {"keys": KEY, "max_points": 2000}
        response = http.get(f"/api/v1/runs/{RUN_ID}/series", params=params)
        data = response.json()["series"][KEY]
        assert data["downsampled"] and 50.0 in data["values"], "spike lost"
        api_s = timed(
            lambda: http.get(f"/api/v1/runs/{RUN_ID}/series", params=params).raise_for_status(),
            repeats,
        )
    api_ms = statistics.median(api_s) * 1000
    return {
        "api_downsampled_median_ms": round(api_ms, 2),
        "api_points_returned": len(data["steps"]),
        "api_response_bytes": len(response.content),
        "spike_kept": True,
        "raw_sql_full_fetch_median_ms": round(statistics.median(raw_s) * 1000, 2),
        "sql_group_by_minmax_median_ms": round(statistics.median(group_s) * 1000, 2),
        "chunks_full_read_median_ms": round(statistics.median(chunks_s) * 1000, 2),
        "speedup_vs_raw_fetch": round(statistics.median(raw_s) * 1000 / api_ms, 1),
    }


def main() -> None:
    """Measure the series query on SQLite and PostgreSQL and print the figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    result: dict[str, object] = {"benchmark": "query", "points": args.points, "max_points": 2000}
    with tempfile.TemporaryDirectory() as folder:
        result["sqlite"] = measure(sqlite_url(Path(folder), "q.db"), args.points, args.repeats)
    if not args.no_postgres:
        with postgres_database() as url:
            result["postgres"] = measure(url, args.points, args.repeats)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
