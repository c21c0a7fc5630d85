"""Run the Alembic migrations shipped with the package (source tree or installed wheel)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine


def migrations_dir() -> Path:
    """Where ``env.py`` lives: the packaged copy, else the repository's ``migrations/``."""
    spec = importlib.util.find_spec("rlguard_backend.migrations")
    if spec is not None and spec.origin is not None:
        return Path(spec.origin).parent
    return Path(__file__).resolve().parents[2] / "migrations"


def alembic_config(engine: Engine | None = None, url: str | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    if url is not None:
        config.attributes["url"] = url
    if engine is not None:
        config.attributes["engine"] = engine
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    with engine.begin() as connection:
        config = alembic_config()
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def downgrade(engine: Engine, revision: str = "base") -> None:
    with engine.begin() as connection:
        config = alembic_config()
        config.attributes["connection"] = connection
        command.downgrade(config, revision)
