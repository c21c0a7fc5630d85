"""Run the Alembic migrations shipped with the package (source tree or installed wheel)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, text

from rlguard_backend.core.db import WRITE_OPTION


def migrations_dir() -> Path:
    """Where ``env.py`` lives: the packaged copy, else the repository's ``migrations/``."""
    spec = importlib.util.find_spec("rlguard_backend.migrations")
    if spec is not None and spec.origin is not None:
        return Path(spec.origin).parent
    return Path(__file__).resolve().parents[2] / "migrations"


def alembic_config(engine: Engine | None = None, url: str | None = None) -> Config:
    """An Alembic config on the shipped migrations, for ``engine`` or ``url``."""
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    if url is not None:
        config.attributes["url"] = url
    if engine is not None:
        config.attributes["engine"] = engine
    return config


# Any constant shared by every rlguard process: the key of the migration lock.
MIGRATION_LOCK_KEY = 0x726C6775  # "rlgu"


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Upgrade the schema; replicas starting together take turns, the later ones find it done.

    On PostgreSQL a transaction-scoped advisory lock serializes them (released at commit); on
    SQLite the transaction begins IMMEDIATE, holding the database's write lock throughout.
    """
    with engine.connect() as plain:
        connection = plain.execution_options(**{WRITE_OPTION: True})
        with connection.begin():
            if connection.dialect.name == "postgresql":
                connection.execute(
                    text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY}
                )
            config = alembic_config()
            config.attributes["connection"] = connection
            command.upgrade(config, revision)


def downgrade(engine: Engine, revision: str = "base") -> None:
    """Downgrade the schema to ``revision`` (``base``: drop everything)."""
    with engine.begin() as connection:
        config = alembic_config()
        config.attributes["connection"] = connection
        command.downgrade(config, revision)


def head_revision() -> str | None:
    """The newest revision the shipped migrations define."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()
