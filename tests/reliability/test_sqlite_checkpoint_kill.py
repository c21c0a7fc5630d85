"""SQLite: the service SIGKILLed while its checkpointer thread is inside a WAL checkpoint, four
times at seeded moments under a heavy write load. After each kill the database file opens and
passes ``PRAGMA integrity_check``; in the end it holds every batch whose 2xx answer arrived
(acknowledgements recorded client-side), and only whole batches."""

from __future__ import annotations

import random
import sqlite3
import time
from pathlib import Path

from rlguard_backend.core.app import create_app
from rlguard_backend.core.config import Settings
from rlguard_backend.core.db import CHECKPOINT_THREAD_NAME
from tests.hook.hookutil import ServiceProcess, stored_series, wait_for
from tests.reliability.fleet import AckedWriter

KILLS = 4
TIMEOUT_S = 60.0
IN_CHECKPOINT_S = 10.0  # how long to watch for the checkpointer inside its I/O
# pread64, pwrite64, fsync, fdatasync on x86-64 and aarch64: the checkpoint copying or syncing
CHECKPOINT_IO = {"17", "18", "74", "75", "67", "68", "82", "83"}


def _checkpoint_thread(pid: int) -> Path:
    for task in Path(f"/proc/{pid}/task").iterdir():
        if (task / "comm").read_text().strip() == CHECKPOINT_THREAD_NAME:
            return task
    raise AssertionError(f"no {CHECKPOINT_THREAD_NAME} thread in process {pid}")


def _kill_inside_a_checkpoint(service: ServiceProcess) -> None:
    """SIGKILL the service the moment its checkpointer thread is in a file read, write or sync."""
    assert service.proc is not None
    syscall = _checkpoint_thread(service.proc.pid) / "syscall"
    deadline = time.monotonic() + IN_CHECKPOINT_S
    while syscall.read_text().split()[0] not in CHECKPOINT_IO:  # a busy watch: no sleeping
        assert time.monotonic() < deadline, "the checkpointer never ran a checkpoint"
    service.kill()


def test_sqlite_killed_inside_wal_checkpoints_keeps_every_acknowledged_batch(
    tmp_path: Path,
) -> None:
    rng = random.Random(5)
    database = tmp_path / "rlguard.db"
    service = ServiceProcess(database).start()
    writers = [AckedWriter(service.url, f"acked-{i}", steps_per_batch=300).start() for i in (0, 1)]
    try:
        for _ in range(KILLS):
            target = sum(len(w.acked) for w in writers) + rng.randint(2, 8)
            wait_for(lambda t=target: sum(len(w.acked) for w in writers) >= t, TIMEOUT_S, "acks")
            _kill_inside_a_checkpoint(service)
            with sqlite3.connect(database) as connection:  # opening it recovers the WAL
                assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            service.start()
        target = sum(len(w.acked) for w in writers) + 2
        wait_for(lambda: sum(len(w.acked) for w in writers) >= target, TIMEOUT_S, "acks")
    finally:
        for writer in writers:
            writer.stop()
    try:
        for writer in writers:
            stored = stored_series(service.url, writer.run_id)
            assert writer.lost(stored) == []
            steps = {frozenset(points) for points in stored.values()}
            assert len(steps) == 1  # every key holds the same steps: whole batches only
            assert len(next(iter(steps))) % writer.steps_per_batch == 0
            assert writer.answers[None] >= 1 and writer.not_json == []
    finally:
        service.stop()


def test_sqlite_commits_sync_the_wal_unless_told_otherwise(tmp_path: Path) -> None:
    # FULL (2): an acknowledged batch is on disk before its answer, power cut included
    for settings, level in (({}, 2), ({"sqlite_synchronous": "normal"}, 1)):
        app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'sync.db'}", **settings))
        with app.state.engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA synchronous").scalar() == level
        app.state.engine.dispose()
