"""Request dependencies: the database (reads, and writes admitted by the write gate) and settings.

Each is a coroutine, so resolving it costs no hop to a worker thread.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request

from rlguard_backend.capacity import Database
from rlguard_backend.config import Settings


async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_database(request: Request) -> Database:
    database: Database = request.app.state.database
    return database


async def admit_write(request: Request) -> AsyncIterator[Database]:
    """The database for a write, or 503 with ``Retry-After`` at once when too many are in flight."""
    database: Database = request.app.state.database
    with database.gate.admitted():
        yield database


SettingsDep = Annotated[Settings, Depends(get_settings)]
DatabaseDep = Annotated[Database, Depends(get_database)]
WriterDep = Annotated[Database, Depends(admit_write)]
