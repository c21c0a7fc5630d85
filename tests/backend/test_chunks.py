"""Packed point storage: whatever order points arrive in, each step is stored once, exactly.

A random mix of the writes a service sees (one-step batches, 100-step batches, large imports,
replays that overwrite, out-of-order and sparse steps, rewinds) goes through the real ingest
API on both databases; after each write the stored chunks must read back as a plain dict
model of the last write of every step, and the chunk invariants must hold.
"""

from __future__ import annotations

import math
import random
import threading
import time
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import text

from rlguard_backend.core.app import create_app
from rlguard_backend.core.config import Settings
from rlguard_backend.core.db import WRITER_CHECKPOINT_PAGES
from rlguard_backend.store.points import (
    MAX_CHUNK_POINTS,
    OWN_CHUNK_POINTS,
    TAIL_CHUNK_POINTS,
    decode,
    read_points,
    read_times,
)
from tests.conftest import new_run_id

Model = dict[int, tuple[float | None, float | None]]


def _encode(value: float | None) -> float | str:
    if value is None or math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def _post(client: TestClient, run_id: str, steps: list[int], rng: random.Random, model: Model):
    body_steps = []
    for step in steps:
        value = rng.choice([rng.random(), rng.random(), None, math.inf, -math.inf])
        moment = None if rng.random() < 0.1 else 1.7e9 + rng.random()
        entry: dict[str, Any] = {"step": step, "values": {"k": _encode(value)}}
        if moment is not None:
            entry["time"] = moment
        body_steps.append(entry)
        model[step] = (value, moment)
    body = {"batch_id": f"b{rng.random()}", "steps": body_steps}
    response = client.post(f"/api/v1/runs/{run_id}/batches", json=body)
    assert response.status_code == 200, response.text


def _check(client: TestClient, run_id: str, model: Model) -> None:
    factory = client.app.state.session_factory  # type: ignore[attr-defined]
    with factory() as session:
        (key_id, last_step, tail_step, tail_count) = session.execute(
            text(
                "SELECT k.id, k.last_step, k.tail_step, k.tail_count FROM metric_keys k "
                "WHERE k.run_id = :run"
            ),
            {"run": run_id},
        ).one()
        chunks = session.execute(
            text(
                "SELECT first_step, last_step, count, step_data, value_data, time_data "
                "FROM point_chunks WHERE key_id = :key ORDER BY first_step"
            ),
            {"key": key_id},
        ).all()
        stored = read_points(session, key_id, 0, 10**12)
        lo, hi = sorted(model)[len(model) // 3], sorted(model)[2 * len(model) // 3]
        window = read_points(session, key_id, lo, hi)
        sample = [*sorted(model)[::7], max(model) + 5]  # the last one was never written
        times = read_times(session, key_id, sample)
    expected = [(s, *model[s]) for s in sorted(model)]
    assert [(s, None if v is None or math.isnan(v) else v, t) for s, v, t in stored] == [
        (s, None if v is None or math.isnan(v) else v, t) for s, v, t in expected
    ]
    assert [row[0] for row in window] == [s for s in sorted(model) if lo <= s <= hi]
    assert times == [model[s][1] if s in model else None for s in sample]
    previous_last = -1
    for first, last, count, step_data, value_data, time_data in chunks:
        rows = decode(step_data, value_data, time_data)
        steps = [row[0] for row in rows]
        assert len(rows) == count and steps[0] == first and steps[-1] == last
        assert steps == sorted(set(steps)) and first > previous_last  # no overlap
        assert count <= MAX_CHUNK_POINTS + TAIL_CHUNK_POINTS
        previous_last = last
    assert last_step == max(model)
    assert (tail_step, tail_count) == (chunks[-1][0], chunks[-1][2])


def test_random_writes_read_back_exactly(client: TestClient) -> None:
    rng = random.Random(7)
    run_id = new_run_id()
    client.post("/api/v1/runs", json={"id": run_id, "project": "chunks"})
    model: Model = {}
    top = 0
    for round_number in range(60):
        kind = rng.choice(["one", "one", "small", "batch", "import", "replay", "sparse", "rewind"])
        if kind == "one":
            steps = [top]
        elif kind == "small":
            steps = list(range(top, top + rng.randint(2, OWN_CHUNK_POINTS - 1)))
        elif kind == "batch":
            steps = list(range(top, top + 100))
        elif kind == "import":
            steps = list(range(top, top + 2 * MAX_CHUNK_POINTS + 17, rng.choice([1, 3])))
        elif kind == "replay" and top > 0:
            start = rng.randrange(top)
            steps = list(range(start, min(top + 50, start + rng.randint(1, 300))))
        elif kind == "sparse" and top > 0:
            steps = sorted(rng.sample(range(top + 40), min(top + 40, 25)))
        elif kind == "rewind" and top > 10 and round_number % 3 == 0:
            back = rng.randrange(1, top - 1)
            response = client.post(f"/api/v1/runs/{run_id}/rewind", json={"resume_from_step": back})
            assert response.status_code == 200, response.text
            model = {s: v for s, v in model.items() if s <= back}
            top = max(model) + 1
            _check(client, run_id, model)
            continue
        else:
            steps = [top]
        _post(client, run_id, steps, rng, model)
        top = max(top, steps[-1] + 1)
        _check(client, run_id, model)


def test_one_step_batches_fill_tail_chunks(client: TestClient) -> None:
    """A trainer posting one step at a time ends up with chunks of ~TAIL_CHUNK_POINTS points."""
    run_id = new_run_id()
    client.post("/api/v1/runs", json={"id": run_id, "project": "chunks"})
    rng, model = random.Random(1), {}
    for step in range(3 * TAIL_CHUNK_POINTS + 5):
        _post(client, run_id, [step], rng, model)
    _check(client, run_id, model)
    factory = client.app.state.session_factory  # type: ignore[attr-defined]
    with factory() as session:
        counts = session.execute(text("SELECT count FROM point_chunks ORDER BY first_step")).all()
    assert [c[0] for c in counts] == [TAIL_CHUNK_POINTS] * 3 + [5]


def test_wal_is_checkpointed_off_the_request_path(sqlite_url: str) -> None:
    """A thread of the service copies the WAL into the database file; writers only append."""
    app = create_app(Settings(database_url=sqlite_url))
    with TestClient(app) as client:
        checkpointer = app.state.checkpointer
        assert "rlguard-checkpoint" in {t.name for t in threading.enumerate()}
        run_id = new_run_id()
        client.post("/api/v1/runs", json={"id": run_id, "project": "wal"})
        _post(client, run_id, list(range(500)), random.Random(3), {})
        started = checkpointer.checkpoints
        deadline = time.monotonic() + 30
        while checkpointer.checkpoints < started + 2 and time.monotonic() < deadline:
            threading.Event().wait(0.05)
        assert checkpointer.checkpoints >= started + 2
        busy, frames, copied = checkpointer.checkpoint()
        assert busy == 0 and frames == copied
        with app.state.engine.connect() as connection:
            pragma = connection.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar_one()
        assert pragma == WRITER_CHECKPOINT_PAGES
    assert not any(t.name == "rlguard-checkpoint" for t in threading.enumerate())
    app.state.engine.dispose()
