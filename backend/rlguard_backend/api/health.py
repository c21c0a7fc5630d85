"""Health: a database round trip, and how loaded this process's writes are."""

from __future__ import annotations

import time

from fastapi import APIRouter
from sqlalchemy import text
from sqlalchemy.orm import Session

from rlguard_backend import __version__
from rlguard_backend.api.deps import PUBLIC, DatabaseDep
from rlguard_backend.schemas import Health, WriteLoad

router = APIRouter(prefix="/v1", tags=["health"])


@router.get("/health", response_model=Health, dependencies=[PUBLIC])
async def read_health(db: DatabaseDep) -> Health:
    def round_trip(session: Session) -> tuple[float, str]:
        started = time.perf_counter()
        session.execute(text("SELECT 1")).scalar_one()
        return (time.perf_counter() - started) * 1000, session.get_bind().dialect.name

    latency_ms, dialect = await db.read(round_trip)
    gate = db.gate
    writes = WriteLoad(
        in_flight=gate.in_flight,
        limit=gate.limit,
        saturated=gate.saturated,
        admitted_total=gate.admitted_total,
        refused_total=gate.refused_total,
    )
    return Health(
        status="ok",
        database=dialect,
        latency_ms=round(latency_ms, 3),
        version=__version__,
        writes=writes,
    )
