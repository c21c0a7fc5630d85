"""Engine construction: SQLite in WAL mode with a busy timeout, Postgres with pre-ping."""

from __future__ import annotations

import ctypes
import logging
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from rlguard_backend.core.stalls import holding_write_lock

WRITE_OPTION = "rlguard_write"
# A writer checkpoints the WAL itself only past this many pages (~40 MB): normally the
# Checkpointer thread has done it long before, off the request path.
WRITER_CHECKPOINT_PAGES = 10_000
WAL_SIZE_LIMIT_BYTES = 64 * 1024 * 1024
CHECKPOINT_THREAD_NAME = "rlguard-ckpt"  # as top -H and /proc/<pid>/task/*/comm show it
PR_SET_NAME = 15

log = logging.getLogger("rlguard_backend.core.db")


def make_engine(
    url: str,
    *,
    sqlite_busy_timeout_ms: int = 30_000,
    pool_size: int = 5,
    sqlite_synchronous: str = "full",
) -> Engine:
    """Create the engine for ``url``; SQLite files get their folder, WAL and write locking.

    ``pool_size`` is the most connections the engine opens (the service passes
    ``Settings.db_pool_size``, one for each thread that may ask). ``sqlite_synchronous``
    ``full`` syncs the write-ahead log at every commit, so an acknowledged batch survives a
    power cut too; ``normal`` syncs only at checkpoints (it survives a crash of the service,
    not of the machine).
    """
    parsed = make_url(url)
    pool = {"pool_size": pool_size, "max_overflow": 0}
    if parsed.get_backend_name() != "sqlite":
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
        return create_engine(parsed, pool_pre_ping=True, **pool)
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(parsed, connect_args={"check_same_thread": False}, **pool)
    else:
        engine = create_engine(parsed, connect_args={"check_same_thread": False})
    _configure_sqlite(engine, sqlite_busy_timeout_ms, sqlite_synchronous)
    return engine


def _configure_sqlite(engine: Engine, busy_timeout_ms: int, synchronous: str) -> None:
    if synchronous not in ("full", "normal"):
        raise ValueError(f"sqlite_synchronous={synchronous!r}: expected 'full' or 'normal'")

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Take transaction control from pysqlite so writers can BEGIN IMMEDIATE: a deferred
        # transaction that reads and then writes fails at once with SQLITE_BUSY instead of
        # waiting for the busy timeout when another writer holds the lock.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cursor.execute(f"PRAGMA synchronous={synchronous.upper()}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA wal_autocheckpoint={WRITER_CHECKPOINT_PAGES}")
        cursor.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT_BYTES}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        immediate = conn.get_execution_options().get(WRITE_OPTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions that keep their objects after commit and flush only when asked."""
    return sessionmaker(engine, expire_on_commit=False, autoflush=False)


# One lock per SQLite engine: writers of this process queue on it and wake the moment the
# previous one is done. Without it they meet at SQLite's lock, whose busy handler sleeps
# 1, 2, 5, 10... ms between tries, so a second ingest request waits for several batches'
# worth of time. Other processes still meet at SQLite's lock (the busy timeout).
_WRITE_LOCKS: WeakKeyDictionary[Engine, threading.Lock] = WeakKeyDictionary()


def _write_lock(factory: sessionmaker[Session]) -> threading.Lock | None:
    engine = factory.kw.get("bind")
    if not isinstance(engine, Engine) or engine.dialect.name != "sqlite":
        return None
    return _WRITE_LOCKS.setdefault(engine, threading.Lock())


@contextmanager
def write_session(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session that takes the write lock up front (SQLite) and rolls back on error.

    The request's write (``core.stalls``) is marked as holding the lock meanwhile.
    """
    lock = _write_lock(factory)
    with lock or nullcontext(), holding_write_lock(), factory() as session:
        session.connection(execution_options={WRITE_OPTION: True})
        try:
            yield session
        except BaseException:
            session.rollback()
            raise


def backup_sqlite(url: str, target: Path) -> int:
    """Copy a SQLite database to ``target`` online (SQLite's backup API); returns its pages.

    Readers and the service's writers go on meanwhile; the copy is one consistent snapshot,
    and holds no WAL of its own.
    """
    import sqlite3

    source_path = make_url(url).database
    if not source_path or source_path == ":memory:":
        raise ValueError(f"{url}: not a SQLite file")
    target.parent.mkdir(parents=True, exist_ok=True)
    source = sqlite3.connect(source_path)
    copy = sqlite3.connect(target)
    try:
        source.backup(copy, pages=4096)
        pages = int(copy.execute("PRAGMA page_count").fetchone()[0])
        copy.execute("PRAGMA journal_mode=DELETE")
    finally:
        copy.close()
        source.close()
    return pages


class Checkpointer:
    """Copies SQLite's write-ahead log into the database file from a thread of its own.

    By default the committing writer does this every 1,000 pages, fsync included, inside
    some unlucky request. Here a PASSIVE checkpoint runs every ``interval_s`` instead: it
    never blocks readers or writers, and sqlite3 releases the GIL while it copies and syncs,
    so ingest keeps going on the other core. Writers still checkpoint themselves past
    WRITER_CHECKPOINT_PAGES, should this thread ever fall behind. A no-op for PostgreSQL.
    """

    def __init__(self, engine: Engine, interval_s: float = 0.25) -> None:
        self.engine = engine
        self.interval_s = interval_s
        self.checkpoints = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rlguard-checkpoint", daemon=True)

    def start(self) -> Checkpointer:
        """Start checkpointing the WAL (SQLite files only; a no-op elsewhere)."""
        if self.engine.dialect.name == "sqlite" and self.engine.url.database not in (
            None,
            "",
            ":memory:",
        ):
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the checkpoint thread (bounded wait)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def checkpoint(self) -> tuple[int, int, int]:
        """One PASSIVE checkpoint: ``(busy, frames in the log, frames copied)``."""
        connection = self.engine.raw_connection()
        try:
            cursor = connection.cursor()
            busy, frames, copied = cursor.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            cursor.close()
        finally:
            connection.close()
        self.checkpoints += 1
        return int(busy), int(frames), int(copied)

    def _loop(self) -> None:
        name_os_thread(CHECKPOINT_THREAD_NAME)
        while not self._stop.wait(self.interval_s):
            try:
                self.checkpoint()
            except Exception:  # keep going through a locked or briefly missing database
                log.exception("WAL checkpoint failed")


def name_os_thread(name: str) -> None:
    """Name the calling thread for the operating system too (Linux; 15 characters at most)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None).prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):  # no libc to ask: the name is only a convenience
        log.debug("could not name thread %s", name)
