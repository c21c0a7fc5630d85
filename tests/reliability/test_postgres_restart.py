"""PostgreSQL restarted under load: a private cluster (never the shared server) stopped and
started while two trainer processes stream into one ``rlguard server`` on it. While it is down
the service answers 503 with a JSON body and health says ``ok: false``, the hooks spool; once it
is back everything logged is stored once and the same backend process kept serving."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.hook.hookutil import ServiceProcess, stored_series, wait_for
from tests.hook.test_faults import stored_samples
from tests.reliability.fleet import (
    AckedWriter,
    Trainer,
    expected_samples,
    expected_series,
    undelivered,
)
from tests.reliability.postgres import PrivatePostgres

SEEDS = (21, 22)
STEP_SLEEP_S = 0.03
TIMEOUT_S = 60.0
ANSWER_BOUND_S = 5.0  # a request while the database is down is answered within this


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    cluster = PrivatePostgres().init()
    cluster.start()
    yield cluster
    cluster.destroy()


def _spooled(trainer: Trainer, folder: Path) -> bool:
    return any((folder / "spool" / trainer.run_id).glob("*.batch"))


def _timed(call: object) -> httpx.Response:
    started = time.monotonic()
    response = call()  # type: ignore[operator]
    assert time.monotonic() - started < ANSWER_BOUND_S
    return response


def test_postgres_restarted_under_load_loses_nothing_and_needs_no_backend_restart(
    private_postgres: PrivatePostgres, tmp_path: Path
) -> None:
    service = ServiceProcess(private_postgres.url).start()
    assert service.proc is not None
    pid = service.proc.pid
    trainers = [
        Trainer(service.url, f"pg-{seed}", tmp_path / f"t{seed}", seed, STEP_SLEEP_S)
        for seed in SEEDS
    ]
    try:
        wait_for(lambda: min(t.progress() for t in trainers) >= 60, TIMEOUT_S, "60 steps")
        writer = AckedWriter(service.url, "pg-acked").start()
        wait_for(lambda: len(writer.acked) >= 3, TIMEOUT_S, "acknowledged batches")
        private_postgres.stop()
        with httpx.Client(base_url=service.url, timeout=TIMEOUT_S) as http:
            body = {"batch_id": "while-down", "steps": [{"step": 0, "values": {"x": 1.0}}]}
            for answer in (
                _timed(lambda: http.post("/api/v1/runs/pg-21/batches", json=body)),
                _timed(lambda: http.get("/api/v1/runs")),
                _timed(lambda: http.get("/api/v1/runs/pg-21/series")),
            ):
                assert answer.status_code == 503, answer.text
                assert "database unavailable" in answer.json()["detail"]
                assert int(answer.headers["Retry-After"]) >= 1
            health = _timed(lambda: http.get("/api/v1/health"))
            assert health.status_code == 503
            assert (health.json()["ok"], health.json()["status"]) == (False, "unavailable")
            for trainer in trainers:
                wait_for(
                    lambda t=trainer: _spooled(t, tmp_path / f"t{t.seed}"),
                    TIMEOUT_S,
                    f"{trainer.run_id} to spool",
                )
            private_postgres.start()
            wait_for(lambda: http.get("/api/v1/health").status_code == 200, TIMEOUT_S, "health")
            assert http.get("/api/v1/health").json()["ok"] is True
            acked = len(writer.acked)
            wait_for(lambda: len(writer.acked) >= acked + 3, TIMEOUT_S, "writes again")
            writer.stop()
        assert set(writer.answers) <= {200, 503, None} and writer.answers[503] > 0, writer.answers
        assert writer.not_json == []
        assert writer.lost(stored_series(service.url, "pg-acked")) == []
        statuses = [t.finish() for t in trainers]
        assert all(s["spooled"] > 0 for s in statuses), statuses
        assert all(not any(undelivered(s).values()) for s in statuses), statuses
        for seed, trainer in zip(SEEDS, trainers, strict=True):
            assert stored_series(service.url, trainer.run_id) == expected_series(seed)
            assert stored_samples(service.url, trainer.run_id) == expected_samples(seed)
        assert service.proc.poll() is None and service.proc.pid == pid
        printed = [service.lines.get() for _ in range(service.lines.qsize())]
        assert not [line for line in printed if "unhandled error" in line], printed
    finally:
        for trainer in trainers:
            trainer.kill()
        service.stop()
