"""Raw DBAPI access for the hot paths: ``executemany`` of tuples without per-row ORM work."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session


@contextmanager
def _cursor(session: Session) -> Iterator[tuple[Any, str]]:
    """A raw cursor in the session's transaction; driver errors become SQLAlchemy's classes."""
    connection = session.connection()
    dbapi = connection.dialect.loaded_dbapi
    cursor = connection.connection.cursor()
    try:
        yield cursor, connection.dialect.paramstyle
    except dbapi.Error as exc:
        raise DBAPIError.instance(None, None, exc, dbapi.Error) from exc
    finally:
        cursor.close()


def _adapt(sql: str, paramstyle: str) -> str:
    return sql if paramstyle == "qmark" else sql.replace("?", "%s")


def executemany(session: Session, sql: str, rows: Sequence[Sequence[Any]]) -> None:
    """Run ``sql`` (written with ``?`` placeholders) once per row, in the session's transaction."""
    if not rows:
        return
    with _cursor(session) as (cursor, paramstyle):
        cursor.executemany(_adapt(sql, paramstyle), rows)


def fetchall(session: Session, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Every row of ``sql`` (``?`` placeholders) as tuples, on the session's connection."""
    with _cursor(session) as (cursor, paramstyle):
        cursor.execute(_adapt(sql, paramstyle), tuple(params))
        return [tuple(row) for row in cursor.fetchall()]


def execute(session: Session, sql: str, params: Sequence[Any] = ()) -> int:
    """Run ``sql`` (``?`` placeholders) on the session's connection; the rows affected."""
    with _cursor(session) as (cursor, paramstyle):
        cursor.execute(_adapt(sql, paramstyle), tuple(params))
        return int(cursor.rowcount)


def execute_arrays(session: Session, sql: str, arrays: Sequence[list[Any]]) -> None:
    """PostgreSQL only: run ``sql`` (``?`` placeholders) with one array per parameter.

    The arrays travel in binary (``%b``): as text, psycopg quotes each element through a
    regular expression and bytea travels hex-encoded, which costs more than the statement.
    """
    with _cursor(session) as (cursor, _):
        cursor.execute(sql.replace("?", "%b"), list(arrays))


def bulk_insert(
    session: Session,
    table: str,
    columns: Sequence[tuple[str, str]],
    rows: Sequence[Sequence[Any]],
    on_conflict: str = "",
) -> None:
    """``INSERT INTO table (columns) ... on_conflict`` for many rows in one round trip.

    ``columns`` pairs each name with its PostgreSQL type: there the rows travel as one array per
    column through ``unnest`` (row-by-row executemany is ~20x slower); SQLite uses executemany.
    """
    if not rows:
        return
    names = ", ".join(name for name, _ in columns)
    if dialect(session) == "postgresql":
        arrays = ", ".join(f"?::{pg_type}[]" for _, pg_type in columns)
        execute_arrays(
            session,
            f"INSERT INTO {table} ({names}) SELECT * FROM unnest({arrays}) {on_conflict}",
            [list(column) for column in zip(*rows, strict=True)],
        )
        return
    values = ", ".join("?" * len(columns))
    executemany(session, f"INSERT INTO {table} ({names}) VALUES ({values}) {on_conflict}", rows)


def dialect(session: Session) -> str:
    """``"sqlite"`` or ``"postgresql"``."""
    return str(session.get_bind().dialect.name)


def placeholders(count: int) -> str:
    """``?, ?, …`` for ``count`` parameters."""
    return ", ".join("?" * count)
