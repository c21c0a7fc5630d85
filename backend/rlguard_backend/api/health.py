"""Health: a database round trip, and how loaded this process's writes are."""

from __future__ import annotations

import logging
import time
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from rlguard_backend import __version__
from rlguard_backend.api.deps import PUBLIC, READ, DatabaseDep
from rlguard_backend.core.capacity import Database
from rlguard_backend.core.metrics import ServiceMetrics
from rlguard_backend.schemas import (
    ERROR_RESPONSES,
    Health,
    HealthUnavailable,
    SchemaState,
    WriteHold,
    WriteLoad,
)

log = logging.getLogger("rlguard_backend")
router = APIRouter(prefix="/v1", tags=["health"])
# served at the root, where Prometheus looks for it
metrics_router = APIRouter(tags=["health"], responses=ERROR_RESPONSES)
UNAVAILABLE: dict[int | str, dict[str, Any]] = {
    503: {"model": HealthUnavailable, "description": "the database did not answer"},
}


@router.get("/health", response_model=Health, dependencies=[PUBLIC], responses=UNAVAILABLE)
async def read_health(request: Request, db: DatabaseDep) -> Health | JSONResponse:
    """200 with ``ok: true`` after a database round trip; 503 with ``ok: false`` without one."""

    def round_trip(session: Session) -> tuple[float, str, str | None]:
        started = time.perf_counter()
        revision = session.execute(text("SELECT version_num FROM alembic_version")).scalar()
        return (time.perf_counter() - started) * 1000, session.get_bind().dialect.name, revision

    try:
        latency_ms, dialect, revision = await db.read(round_trip)
    except DBAPIError as exc:
        return _unavailable(request, db, exc)
    head = request.app.state.schema_head
    return Health(
        status="ok",
        database=dialect,
        latency_ms=round(latency_ms, 3),
        version=__version__,
        writes=_write_load(db),
        schema=SchemaState(revision=revision, head=head, current=revision == head),
        time=time.time(),
    )


def _write_load(db: Database) -> WriteLoad:
    gate, hold = db.gate, db.writes.longest_hold()
    return WriteLoad(
        in_flight=gate.in_flight,
        limit=gate.limit,
        saturated=gate.saturated,
        admitted_total=gate.admitted_total,
        refused_total=gate.refused_total,
        oldest_s=db.writes.oldest_by_route(),
        lock_holder=None if hold is None else WriteHold(**vars(hold)),
        holds_over_limit_total=db.writes.holds_over_limit_total,
    )


def _unavailable(request: Request, db: Database, exc: DBAPIError) -> JSONResponse:
    log.warning("health: the database did not answer: %s", exc)
    request.app.state.metrics.database_errors.inc()
    body = HealthUnavailable(
        detail=f"database unavailable ({type(exc.orig).__name__}); retry shortly",
        database=request.app.state.engine.dialect.name,
        version=__version__,
        writes=_write_load(db),
        time=time.time(),
    )
    retry = {"Retry-After": str(request.app.state.settings.retry_after_s)}
    return JSONResponse(body.model_dump(), status_code=503, headers=retry)


@metrics_router.get(
    "/metrics",
    response_class=Response,
    dependencies=[READ],
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text"}},
)
async def read_metrics(request: Request, db: DatabaseDep) -> Response:
    """Ingest rate and latency, detector time, refusals, open alerts, webhook outbox."""
    metrics: ServiceMetrics = request.app.state.metrics
    await db.read(metrics.read_database)
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)
