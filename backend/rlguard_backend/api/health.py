"""Health: a database round trip, and how loaded this process's writes are."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from sqlalchemy.orm import Session

from rlguard_backend import __version__
from rlguard_backend.api.deps import PUBLIC, READ, DatabaseDep
from rlguard_backend.metrics import ServiceMetrics
from rlguard_backend.schemas import ERROR_RESPONSES, Health, SchemaState, WriteLoad

router = APIRouter(prefix="/v1", tags=["health"])
# served at the root, where Prometheus looks for it
metrics_router = APIRouter(tags=["health"], responses=ERROR_RESPONSES)


@router.get("/health", response_model=Health, dependencies=[PUBLIC])
async def read_health(request: Request, db: DatabaseDep) -> Health:
    """Database round trip, schema revision against the shipped head, clock and write gate."""

    def round_trip(session: Session) -> tuple[float, str, str | None]:
        started = time.perf_counter()
        revision = session.execute(text("SELECT version_num FROM alembic_version")).scalar()
        return (time.perf_counter() - started) * 1000, session.get_bind().dialect.name, revision

    latency_ms, dialect, revision = await db.read(round_trip)
    head = request.app.state.schema_head
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
        schema=SchemaState(revision=revision, head=head, current=revision == head),
        time=time.time(),
    )


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
    metrics.writes_in_flight.set(db.gate.in_flight)
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)
