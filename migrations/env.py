"""Alembic environment: the URL comes from the caller (``config.attributes``) or from Settings."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from rlguard_backend.core.config import Settings
from rlguard_backend.core.db import make_engine
from rlguard_backend.models import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.attributes.get("url") or Settings().database_url
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("rlguard migrations run online only: give a database URL")
run_migrations_online()
