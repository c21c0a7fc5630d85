"""Raw DBAPI access for the hot paths: ``executemany`` of tuples without per-row ORM work."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session


def _cursor(session: Session) -> tuple[Any, str]:
    connection = session.connection()
    return connection.connection.cursor(), connection.dialect.paramstyle


def _adapt(sql: str, paramstyle: str) -> str:
    return sql if paramstyle == "qmark" else sql.replace("?", "%s")


def executemany(session: Session, sql: str, rows: Sequence[Sequence[Any]]) -> None:
    """Run ``sql`` (written with ``?`` placeholders) once per row, in the session's transaction."""
    if not rows:
        return
    cursor, paramstyle = _cursor(session)
    try:
        cursor.executemany(_adapt(sql, paramstyle), rows)
    finally:
        cursor.close()


def fetchall(session: Session, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    cursor, paramstyle = _cursor(session)
    try:
        cursor.execute(_adapt(sql, paramstyle), tuple(params))
        return [tuple(row) for row in cursor.fetchall()]
    finally:
        cursor.close()


def execute(session: Session, sql: str, params: Sequence[Any] = ()) -> int:
    cursor, paramstyle = _cursor(session)
    try:
        cursor.execute(_adapt(sql, paramstyle), tuple(params))
        return int(cursor.rowcount)
    finally:
        cursor.close()


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
    cursor, paramstyle = _cursor(session)
    try:
        if paramstyle == "qmark":
            values = ", ".join("?" * len(columns))
            cursor.executemany(f"INSERT INTO {table} ({names}) VALUES ({values}) {on_conflict}", rows)
            return
        arrays = ", ".join(f"%s::{pg_type}[]" for _, pg_type in columns)
        cursor.execute(
            f"INSERT INTO {table} ({names}) SELECT * FROM unnest({arrays}) {on_conflict}",
            [list(column) for column in zip(*rows, strict=True)],
        )
    finally:
        cursor.close()
