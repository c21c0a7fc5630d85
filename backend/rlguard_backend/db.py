"""Engine construction: SQLite in WAL mode with a busy timeout, Postgres with pre-ping."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

WRITE_OPTION = "rlguard_write"


def make_engine(url: str, *, sqlite_busy_timeout_ms: int = 30_000) -> Engine:
    """Create the engine for ``url``; SQLite files get their folder, WAL and write locking."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
        return create_engine(parsed, pool_pre_ping=True, pool_size=10, max_overflow=10)
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(parsed, connect_args={"check_same_thread": False})
    _configure_sqlite(engine, sqlite_busy_timeout_ms)
    return engine


def _configure_sqlite(engine: Engine, busy_timeout_ms: int) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Take transaction control from pysqlite so writers can BEGIN IMMEDIATE: a deferred
        # transaction that reads and then writes fails at once with SQLITE_BUSY instead of
        # waiting for the busy timeout when another writer holds the lock.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        immediate = conn.get_execution_options().get(WRITE_OPTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False, autoflush=False)


@contextmanager
def write_session(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session that takes the write lock up front (SQLite) and rolls back on error."""
    with factory() as session:
        session.connection(execution_options={WRITE_OPTION: True})
        try:
            yield session
        except BaseException:
            session.rollback()
            raise
