"""A stall you can see: the health answer and /metrics show the oldest write in flight per route
and the write holding the lock; a hold past RLGUARD_WRITE_HOLD_WARN_S is logged with its route
and run while it still holds the lock, and again when it lets go."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy.engine import make_url

from rlguard_backend.core.stalls import WritesInFlight
from tests.backend.test_capacity import TIMEOUT_S, batch, health, post, serving, writes_blocked
from tests.conftest import new_run_id
from tests.hook.hookutil import wait_for

ROUTE = "POST /api/v1/runs/{run_id}/batches"


@contextlib.contextmanager
def database_locked(app: Any, db_url: str, run_id: str) -> Iterator[None]:
    """Hold the database's own lock from another connection, outside the service's process
    lock: SQLite's write lock (BEGIN IMMEDIATE), PostgreSQL's lock on the run's row."""
    if not db_url.startswith("sqlite"):
        with writes_blocked(app, db_url, run_id):
            yield
        return
    other = sqlite3.connect(str(make_url(db_url).database), isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        yield
        other.execute("ROLLBACK")
    finally:
        other.close()


def logged(caplog: pytest.LogCaptureFixture, *parts: str) -> list[str]:
    """The captured messages holding every one of ``parts``."""
    return [m for m in caplog.messages if all(part in m for part in parts)]


def test_stalls_a_write_holding_the_lock_is_shown_and_logged(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="rlguard_backend.core.stalls")
    run_id = new_run_id("stalled")
    with serving(db_url, write_hold_warn_s=0.2) as (url, app):
        assert post(url, "/runs", {"id": run_id, "project": "p"}).status_code == 201
        answers: list[httpx.Response] = []
        with database_locked(app, db_url, run_id):
            sender = threading.Thread(
                target=lambda: answers.append(
                    post(url, f"/runs/{run_id}/batches", batch("held", range(5)))
                )
            )
            sender.start()
            writes = wait_for(
                lambda: (load := health(url))["lock_holder"] and load, TIMEOUT_S, "a holder"
            )
            assert (writes["lock_holder"]["route"], writes["lock_holder"]["run_id"]) == (
                ROUTE,
                run_id,
            )
            assert list(writes["oldest_s"]) == [ROUTE]
            held = wait_for(
                lambda: logged(caplog, ROUTE, run_id, "has held the write lock"), TIMEOUT_S, "a log"
            )
            assert "RLGUARD_WRITE_HOLD_WARN_S=0.2" in held[0]
            scraped = httpx.get(f"{url}/metrics", timeout=TIMEOUT_S).text
            assert f'rlguard_write_oldest_seconds{{route="{ROUTE}"}}' in scraped
            assert "rlguard_write_holds_over_limit_total 1.0" in scraped
        sender.join(timeout=TIMEOUT_S)
        assert [a.status_code for a in answers] == [200]
        assert len(logged(caplog, ROUTE, run_id, "let go of the write lock after")) == 1
        writes = health(url)
        assert (writes["oldest_s"], writes["lock_holder"], writes["holds_over_limit_total"]) == (
            {},
            None,
            1,
        )


def test_stalls_a_long_hold_that_ended_unseen_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="rlguard_backend.core.stalls")
    writes = WritesInFlight(hold_warn_s=0.5)
    unit = writes.admit("POST /api/v1/runs/{run_id}/detect", "r1")
    writes.released(unit, held_s=0.7)
    writes.released(unit, held_s=0.1)
    writes.leave(unit)
    assert (writes.holds_over_limit_total, writes.oldest_by_route()) == (1, {})
    assert caplog.messages == [
        "POST /api/v1/runs/{run_id}/detect (run r1) held the write lock for 0.7 s, past "
        "RLGUARD_WRITE_HOLD_WARN_S=0.5"
    ]


def test_stalls_oldest_write_per_route() -> None:
    writes = WritesInFlight(hold_warn_s=30)
    first = writes.admit("POST /api/v1/runs", None)
    writes.admit("POST /api/v1/runs", None)
    writes.admit("POST /api/v1/runs/{run_id}/batches", "r1")
    oldest = writes.oldest_by_route()
    assert list(oldest) == ["POST /api/v1/runs", "POST /api/v1/runs/{run_id}/batches"]
    assert oldest["POST /api/v1/runs"] >= oldest["POST /api/v1/runs/{run_id}/batches"] >= 0
    writes.leave(first)
    assert writes.longest_hold() is None
