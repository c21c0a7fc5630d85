"""Points: batch ingest, metric keys, series queries and CSV export."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session, sessionmaker

from rlguard.protocol import MAX_STEP
from rlguard_backend import ingest, packed
from rlguard_backend.api.bodies import documented_body, once_per_batch_id, read_body
from rlguard_backend.api.deps import READ, WRITE, DatabaseDep, RunRefDep, SettingsDep, WriterDep
from rlguard_backend.core.config import Settings
from rlguard_backend.core.db import write_session
from rlguard_backend.core.errors import InvalidField, NotFound
from rlguard_backend.core.metrics import ServiceMetrics
from rlguard_backend.detection import alerts, feed
from rlguard_backend.schemas import (
    ERROR_RESPONSES,
    BatchAck,
    BatchIn,
    MetricKeyList,
    SeriesResponse,
    Step,
)
from rlguard_backend.store import commands, policies, repository, series, storage

router = APIRouter(prefix="/v1/runs/{run_id}", tags=["points"], responses=ERROR_RESPONSES)

BATCH_BODY_EXAMPLE = {
    "batch_id": "3f2a9c0e5b7d4e1f",
    "steps": [{"step": 12, "time": 1732870000.5, "values": {"actor/ppo_kl": 0.003, "x": "NaN"}}],
}


@router.post(
    "/batches",
    response_model=BatchAck,
    dependencies=[WRITE],
    openapi_extra=documented_body(BatchIn, BATCH_BODY_EXAMPLE),
)
async def ingest_batch(
    run_id: str, request: Request, db: WriterDep, settings: SettingsDep
) -> Response:
    """Store one batch (gzip accepted; JSON, or the hook's packed arrays, ``rlguard_backend.
    packed``) completely or not at all; a known batch id is a no-op."""
    body = await read_body(request, settings.max_batch_bytes)
    encoding = request.headers.get("content-encoding")
    parse = (
        packed.parse_packed_batch
        if packed.is_packed(request.headers.get("content-type"))
        else ingest.parse_batch
    )

    metrics: ServiceMetrics = request.app.state.metrics

    def parse_and_store() -> BatchAck:
        with metrics.batch_seconds.time():
            raw = ingest.decode_body(body, encoding, settings.max_batch_bytes)
            batch = parse(raw, settings.max_batch_points)
            return _store_batch(db.factory, settings, run_id, batch, metrics)

    ack = await db.on_write_thread(parse_and_store)
    metrics.batches.labels("duplicate" if ack.duplicate else "stored").inc()
    if not ack.duplicate:
        metrics.points.inc(ack.points)
    return Response(ack.model_dump_json(), media_type="application/json")


def _store_batch(
    factory: sessionmaker[Session],
    settings: Settings,
    run_id: str,
    batch: BatchIn,
    metrics: ServiceMetrics,
) -> BatchAck:
    """The unit of work of one batch: points, rollups, detectors and alerts, one commit.

    Parsing happens before, outside the write lock; the lock is held only for this.
    """

    def store() -> BatchAck:
        with write_session(factory) as session:
            ack = store_and_detect(session, settings, run_id, batch, metrics)
            session.commit()
            return ack

    def replayed() -> BatchAck:
        count = sum(len(s.values) for s in batch.steps)
        return BatchAck(
            batch_id=batch.batch_id, duplicate=True, points=count, steps=len(batch.steps), alerts=[]
        )

    return once_per_batch_id(factory, run_id, batch.batch_id, store, replayed)


def store_and_detect(
    session: Session, settings: Settings, run_id: str, batch: BatchIn, metrics: ServiceMetrics
) -> BatchAck:
    """Store a batch's points and feed them to the run's detectors, in the caller's unit of
    work (it commits); a known batch id writes nothing."""
    opened = ingest.open_batch(session, run_id, batch)  # locks the run
    if opened.duplicate:
        return opened.ack
    live = None
    if settings.detectors_enabled:
        # Before the points are stored: a suite resumed from its checkpoint catches up on the
        # stored steps, which this batch may rewrite.
        live = feed.live_suite(session, run_id, opened.config, settings, opened.run_last_step)
    ack, _, _ = ingest.store_batch(session, run_id, batch, opened)
    if live is not None:
        with metrics.detector_seconds.time():
            found = feed.detect_steps(session, live, batch.steps, settings)
        ack.alerts = alerts.to_publics(session, found)
    policies.apply(session, run_id)
    ack.commands = [commands.to_public(c) for c in commands.pending(session, run_id)]
    return ack


@router.get("/keys", response_model=MetricKeyList, dependencies=[READ])
async def read_keys(run: RunRefDep, db: DatabaseDep) -> MetricKeyList:
    """The run's metric keys with point counts, step ranges and canonical signals."""

    def read(session: Session) -> MetricKeyList:
        keys = repository.describe_keys(session, run.resolve(session).id)
        return MetricKeyList(data=keys, count=len(keys))

    return await db.read(read)


def _parse_keys(keys: str | None, session: Session, run_id: str) -> list[str]:
    if keys is None or not keys.strip():
        return [k.name for k in repository.run_keys(session, run_id)]
    return [k for k in (part.strip() for part in keys.split(",")) if k]


# The series parameters, shared with ``GET /series`` (several runs at once).
DEFAULT_MAX_SERIES_POINTS: int = Settings.model_fields["max_series_points"].default


def max_points_query(description: str) -> Any:
    """``max_points``: at least 8; the maximum stated is the setting's default, checked against
    the setting itself by ``check_max_points``."""
    return Query(
        ge=8,
        description=f"{description}; the maximum is RLGUARD_MAX_SERIES_POINTS' default: a "
        "server set lower refuses more (422), one set higher takes more",
        json_schema_extra={"maximum": DEFAULT_MAX_SERIES_POINTS},
    )


MaxPoints = Annotated[int, max_points_query("most points a series returns")]
Smoothing = Annotated[
    float, Query(ge=0.0, lt=1.0, description="EMA weight, TensorBoard-style; 0 is off")
]
IncludeTimes = Annotated[bool, Query(description="wall times for downsampled points")]


@router.get("/series", response_model=SeriesResponse, dependencies=[READ])
async def read_series(
    run: RunRefDep,
    db: DatabaseDep,
    settings: SettingsDep,
    keys: Annotated[str | None, Query(description="comma-separated keys; all when omitted")] = None,
    from_step: Step = 0,
    to_step: Step | None = None,
    after_step: Annotated[int | None, Query(ge=-1, description="live cursor: steps > this")] = None,
    max_points: MaxPoints = 2000,
    smoothing: Smoothing = 0.0,
    include_times: IncludeTimes = False,
) -> Response:
    """Several keys in one call; more than ``max_points`` in range are min/max-bucketed.

    Keys the run never logged are listed in ``missing`` (a key one run of a sweep lacks is no
    reason to fail the others).
    """
    check_max_points(max_points, settings)
    lo = from_step if after_step is None else max(from_step, after_step + 1)

    def read(session: Session) -> bytes:
        run_id = run.resolve(session).id
        names = _parse_keys(keys, session, run_id)
        found = {k.name: k for k in repository.run_keys(session, run_id) if k.name in set(names)}
        result = SeriesResponse.model_construct(
            run_id=run_id,
            series={
                n: series.read_series(
                    session,
                    found[n],
                    lo,
                    to_step,
                    max_points,
                    smoothing=smoothing,
                    include_times=include_times,
                )
                for n in names
                if n in found
            },
            missing=[n for n in names if n not in found],
        )
        return result.model_dump_json().encode()

    return Response(await db.read(read), media_type="application/json")


def check_max_points(max_points: int, settings: Settings) -> None:
    """422 naming the fix when ``max_points`` is past the server's limit."""
    if max_points > settings.max_series_points:
        raise InvalidField(
            ["query", "max_points"],
            f"max_points={max_points} exceeds the server limit of {settings.max_series_points} "
            "(RLGUARD_MAX_SERIES_POINTS); ask for fewer points or page with from_step/to_step",
        )


@router.get("/export", response_class=StreamingResponse, dependencies=[READ])
async def export_run(
    run: RunRefDep,
    db: DatabaseDep,
    keys: Annotated[str | None, Query(description="comma-separated keys; all when omitted")] = None,
) -> StreamingResponse:
    """CSV with one row per step and one column per key; NaN and ±inf written as NaN/inf/-inf."""

    def read(session: Session) -> tuple[str, list[str], dict[int, dict[str, str]]]:
        run_id = run.resolve(session).id
        names = _parse_keys(keys, session, run_id)
        found = {k.name: k for k in repository.run_keys(session, run_id)}
        unknown = [n for n in names if n not in found]
        if unknown:
            raise NotFound(f"run {run_id!r} has no key(s) {unknown}")
        table: dict[int, dict[str, str]] = {}
        for name in names:
            for step, value, _ in storage.STORE.read_points(session, found[name].id, 0, MAX_STEP):
                table.setdefault(step, {})[name] = _csv_value(value)
        return run_id, names, table

    run_id, names, table = await db.read(read)
    headers = {"Content-Disposition": f'attachment; filename="{run_id}.csv"'}
    return StreamingResponse(_csv_rows(names, table), media_type="text/csv", headers=headers)


def _csv_value(value: float | None) -> str:
    return "NaN" if value is None else repr(value)


def _csv_rows(names: list[str], table: dict[int, dict[str, str]]) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["step", *names])
    for step in sorted(table):
        row = table[step]
        writer.writerow([step, *(row.get(n, "") for n in names)])
        if buffer.tell() > 65536:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()
