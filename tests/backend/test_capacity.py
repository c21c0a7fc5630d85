"""Holding the load: more simultaneous clients than threads and connections never deadlock the
service, reads answer while writes are saturated, writes past the in-flight limit get 503 with
Retry-After at once, the hook backs off and delivers everything afterwards, and SIGTERM stops a
saturated service within a bound."""

from __future__ import annotations

import contextlib
import signal
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from pydantic import ValidationError
from sqlalchemy import select

import rlguard
from rlguard_backend.core.app import create_app
from rlguard_backend.core.capacity import BodyBudget
from rlguard_backend.core.config import Settings
from rlguard_backend.core.db import make_engine, make_session_factory, write_session
from rlguard_backend.core.errors import Saturated
from rlguard_backend.core.serve import ServerThread
from rlguard_backend.models import Run
from tests.conftest import new_run_id
from tests.hook.hookutil import ServiceProcess, stored_series, wait_for

T = TypeVar("T")
DEFAULTS = Settings()
# More than every pool of a process with the default settings: read and write threads and
# database connections together.
SIMULTANEOUS = 2 * (DEFAULTS.read_threads + DEFAULTS.write_threads + DEFAULTS.db_pool_size)
TIMEOUT_S = 60.0


@contextlib.contextmanager
def serving(db_url: str, **overrides: Any) -> Iterator[tuple[str, Any]]:
    app = create_app(Settings(database_url=db_url, **overrides))
    with ServerThread(app) as server:
        yield server.url, app
    app.state.engine.dispose()


def at_once(n: int, call: Callable[[int], T]) -> list[T]:
    """``call(i)`` for i in range(n), from n threads released together by a barrier."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n

    def worker(i: int) -> None:
        barrier.wait(timeout=TIMEOUT_S)
        results[i] = call(i)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=2 * TIMEOUT_S)
    assert not any(t.is_alive() for t in threads), "a client never got an answer"
    return results


def batch(batch_id: str, steps: range, keys: int = 5) -> dict[str, Any]:
    values = {f"k{k}": float(k) for k in range(keys)}
    return {"batch_id": batch_id, "steps": [{"step": s, "values": values} for s in steps]}


def post(url: str, path: str, payload: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{url}/api/v1{path}", json=payload, timeout=TIMEOUT_S)


def health(url: str) -> dict[str, Any]:
    answer = httpx.get(f"{url}/api/v1/health", timeout=TIMEOUT_S)
    assert answer.status_code == 200
    writes: dict[str, Any] = answer.json()["writes"]
    return writes


@contextlib.contextmanager
def writes_blocked(app: Any, db_url: str, run_id: str) -> Iterator[None]:
    """Hold a real database lock that the run's batches wait for, until the block ends.

    SQLite: the process's write lock and the database's, as a writer of this process takes
    them. PostgreSQL: the run's row, locked from a connection of another engine.
    """
    if db_url.startswith("sqlite"):
        with write_session(app.state.session_factory):
            yield
        return
    engine = make_engine(db_url)
    try:
        with make_session_factory(engine)() as session:
            session.execute(select(Run).where(Run.id == run_id).with_for_update())
            yield
            session.rollback()
    finally:
        engine.dispose()


@contextlib.contextmanager
def saturated(app: Any, url: str, db_url: str, run_id: str, limit: int) -> Iterator[list[Any]]:
    """``limit`` batches of ``run_id`` stuck behind a held lock; yields their answers after."""
    answers: list[Any] = []
    with writes_blocked(app, db_url, run_id):
        senders = [
            threading.Thread(
                target=lambda i=i: answers.append(
                    post(
                        url,
                        f"/runs/{run_id}/batches",
                        batch(f"held-{i}", range(1000 + i, 1001 + i)),
                    )
                )
            )
            for i in range(limit)
        ]
        for sender in senders:
            sender.start()
        wait_for(lambda: health(url)["in_flight"] == limit, TIMEOUT_S, "the gate to fill")
        yield answers
    for sender in senders:
        sender.join(timeout=TIMEOUT_S)
    assert [a.status_code for a in answers] == [200] * limit


def test_capacity_simultaneous_creations_and_batches_beyond_every_pool_all_answer(
    db_url: str,
) -> None:
    run_ids = [new_run_id("sweep") for _ in range(SIMULTANEOUS)]
    with serving(db_url, max_inflight_writes=10 * SIMULTANEOUS) as (url, _app):
        created = at_once(
            SIMULTANEOUS, lambda i: post(url, "/runs", {"id": run_ids[i], "project": "sweep"})
        )
        assert [r.status_code for r in created] == [201] * SIMULTANEOUS
        stored = at_once(
            SIMULTANEOUS,
            lambda i: post(url, f"/runs/{run_ids[i]}/batches", batch("b0", range(10))),
        )
        assert [r.status_code for r in stored] == [200] * SIMULTANEOUS
        assert {r.json()["points"] for r in stored} == {50}
        listed = httpx.get(f"{url}/api/v1/runs", params={"project": "sweep", "limit": 1000})
        assert listed.json()["count"] == SIMULTANEOUS
        keys = httpx.get(f"{url}/api/v1/runs/{run_ids[-1]}/keys").json()["data"]
        assert [k["count"] for k in keys] == [10] * 5
        assert health(url) == {
            "in_flight": 0,
            "limit": 10 * SIMULTANEOUS,
            "saturated": False,
            "admitted_total": 2 * SIMULTANEOUS,
            "refused_total": 0,
            "oldest_s": {},
            "lock_holder": None,
            "holds_over_limit_total": 0,
        }


def test_capacity_writes_past_the_limit_get_503_while_reads_answer(db_url: str) -> None:
    run_id, limit, extra = new_run_id(), 4, SIMULTANEOUS
    settings = {"max_inflight_writes": limit, "write_threads": 2, "retry_after_s": 3}
    with serving(db_url, **settings) as (url, app):
        assert post(url, "/runs", {"id": run_id, "project": "load"}).status_code == 201
        assert post(url, f"/runs/{run_id}/batches", batch("first", range(100, 110))).is_success
        with saturated(app, url, db_url, run_id, limit):
            refused = at_once(
                extra, lambda i: post(url, f"/runs/{run_id}/batches", batch(f"r{i}", range(5)))
            )
            assert {(r.status_code, r.headers.get("retry-after")) for r in refused} == {(503, "3")}
            assert "max_inflight_writes=4" in refused[0].json()["detail"]
            assert post(url, "/runs", {"id": new_run_id(), "project": "load"}).status_code == 503
            reads = [
                "/health",
                "/runs",
                f"/runs/{run_id}",
                f"/runs/{run_id}/keys",
                f"/runs/{run_id}/series?keys=k0",
                f"/runs/{run_id}/alerts",
            ]
            answers = at_once(
                len(reads), lambda i: httpx.get(f"{url}/api/v1{reads[i]}", timeout=TIMEOUT_S)
            )
            assert [a.status_code for a in answers] == [200] * len(reads)
            assert answers[4].json()["series"]["k0"]["steps"] == list(range(100, 110))
            writes = health(url)
            assert (writes["saturated"], writes["refused_total"]) == (True, extra + 1)
            scraped = httpx.get(f"{url}/metrics", timeout=TIMEOUT_S).text
            assert f"rlguard_writes_refused_total {float(extra + 1)}" in scraped  # one count
        again = [
            post(url, f"/runs/{run_id}/batches", batch(f"r{i}", range(5))) for i in range(extra)
        ]
        assert [r.status_code for r in again] == [200] * extra
        keys = httpx.get(f"{url}/api/v1/runs/{run_id}/keys").json()["data"]
        assert [k["count"] for k in keys] == [5 + limit + 10] * 5
        assert health(url)["in_flight"] == 0


def test_capacity_hook_backs_off_on_503_and_delivers_everything(
    sqlite_url: str, tmp_path: Path
) -> None:
    run_id, anchor, limit = new_run_id("hook"), new_run_id("anchor"), 2
    settings = {"max_inflight_writes": limit, "write_threads": 1, "retry_after_s": 2}
    with serving(sqlite_url, **settings) as (url, app):
        assert post(url, "/runs", {"id": anchor, "project": "load"}).status_code == 201
        with saturated(app, url, sqlite_url, anchor, limit):
            run = rlguard.init(
                project="load", run_id=run_id, url=url, spool_dir=str(tmp_path / "spool")
            )
            for step in range(50):
                run.log({f"m{k}": step + k for k in range(10)}, step=step)
            assert run.flush(timeout_s=TIMEOUT_S)
            status = run.status()
            assert (status.sent, status.spooled, status.dropped) == (0, 500, 0)
            assert status.last_error is not None and "HTTP 503" in status.last_error
            assert run._sender is not None
            # The hook's own first backoff is at most 0.5 s; the service asked for 2 s.
            assert run._sender._retry_at - time.monotonic() > 1.0
        run.finish(timeout_s=TIMEOUT_S)
        status = run.status()
        assert (status.replayed, status.spool_points, status.dropped) == (500, 0, 0)
        series = stored_series(url, run_id)
        assert sorted(series) == [f"m{k}" for k in range(10)]
        assert all(len(points) == 50 for points in series.values())
        assert series["m3"][49] == 52


def test_capacity_sigterm_stops_a_saturated_service_within_bounds(tmp_path: Path) -> None:
    db_path, run_id, limit = tmp_path / "rlguard.db", new_run_id(), 6
    env = {
        "RLGUARD_SHUTDOWN_TIMEOUT_S": "2",
        "RLGUARD_MAX_INFLIGHT_WRITES": str(limit),
        "RLGUARD_SQLITE_BUSY_TIMEOUT_MS": "600000",
    }
    service = ServiceProcess(db_path, env=env).start()
    try:
        assert post(service.url, "/runs", {"id": run_id, "project": "load"}).status_code == 201
        outside = sqlite3.connect(db_path, isolation_level=None)
        outside.execute("BEGIN IMMEDIATE")  # another process holds SQLite's write lock
        clients = [
            threading.Thread(
                target=_post_ignoring_errors,
                args=(service.url, f"/runs/{run_id}/batches", batch(f"s{i}", range(i, i + 1))),
                daemon=True,
            )
            for i in range(limit)
        ]
        for client in clients:
            client.start()
        wait_for(lambda: health(service.url)["saturated"], TIMEOUT_S, "saturation")
        assert service.proc is not None
        started = time.monotonic()
        service.proc.send_signal(signal.SIGTERM)
        # Blocked writers would wait 600 s for SQLite's lock; the service must not. uvicorn
        # ends by raising the SIGTERM it handled once more.
        assert service.proc.wait(timeout=TIMEOUT_S) in (0, -signal.SIGTERM)
        assert time.monotonic() - started < TIMEOUT_S
        outside.rollback()
        outside.close()
    finally:
        service.kill()


def _post_ignoring_errors(url: str, path: str, payload: dict[str, Any]) -> None:
    with contextlib.suppress(httpx.HTTPError):
        post(url, path, payload)


def test_capacity_settings_size_the_pool_and_refuse_an_unusable_gate() -> None:
    settings = Settings(read_threads=8, write_threads=2, max_inflight_writes=2)
    assert settings.db_pool_size == 8 + 2 + 3
    with pytest.raises(ValidationError, match="max_inflight_writes=1 is below write_threads=2"):
        Settings(write_threads=2, max_inflight_writes=1)


def test_a_body_budget_below_the_largest_body_is_refused_at_start() -> None:
    mib = 1 << 20
    assert Settings().max_inflight_body_bytes == 256 * mib
    assert Settings(max_batch_bytes=4 * mib, max_inflight_body_bytes=4 * mib)
    with pytest.raises(ValidationError, match="RLGUARD_MAX_INFLIGHT_BODY_BYTES"):
        Settings(max_batch_bytes=4 * mib, max_inflight_body_bytes=4 * mib - 1)
    with pytest.raises(ValidationError, match="max_inflight_body_bytes=1000 is below"):
        Settings(max_request_bytes=2000, max_batch_bytes=1000, max_inflight_body_bytes=1000)


def test_the_body_budget_refuses_what_does_not_fit_and_counts_it() -> None:
    budget = BodyBudget(limit=10, retry_after_s=3)
    budget.charge(6)
    with pytest.raises(Saturated, match="6 bytes are in flight") as refused:
        budget.charge(5)
    assert refused.value.headers == {"Retry-After": "3"}
    assert (budget.held, budget.refused_total) == (6, 1)
    budget.charge(4)
    budget.release(10)
    assert budget.held == 0
