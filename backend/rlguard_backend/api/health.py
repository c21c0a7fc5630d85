"""Health: a database round trip."""

from __future__ import annotations

import time

from fastapi import APIRouter
from sqlalchemy import text

from rlguard_backend import __version__
from rlguard_backend.api.deps import SessionDep
from rlguard_backend.schemas import Health

router = APIRouter(prefix="/v1", tags=["health"])


@router.get("/health", response_model=Health)
def read_health(session: SessionDep) -> Health:
    started = time.perf_counter()
    session.execute(text("SELECT 1")).scalar_one()
    latency_ms = (time.perf_counter() - started) * 1000
    dialect = session.get_bind().dialect.name
    return Health(
        status="ok", database=dialect, latency_ms=round(latency_ms, 3), version=__version__
    )
