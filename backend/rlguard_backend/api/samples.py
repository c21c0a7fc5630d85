"""Rollout samples: batch ingest, reads per run (sorted, filtered, searched, paged), per alert."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response
from sqlalchemy.orm import Session, sessionmaker

from rlguard_backend import ingest
from rlguard_backend.api.bodies import documented_body, once_per_batch_id, read_body
from rlguard_backend.api.deps import (
    READ,
    WRITE,
    AlertId,
    DatabaseDep,
    Limit,
    Offset,
    RunRefDep,
    SettingsDep,
    WriterDep,
)
from rlguard_backend.api.points import store_and_detect
from rlguard_backend.core.config import Settings
from rlguard_backend.core.db import write_session
from rlguard_backend.core.errors import InvalidField
from rlguard_backend.core.metrics import ServiceMetrics
from rlguard_backend.detection import alerts
from rlguard_backend.schemas import (
    ERROR_RESPONSES,
    SampleAck,
    SampleBatchIn,
    SampleList,
    SampleStep,
    SampleStepList,
    Step,
)
from rlguard_backend.store import samples
from rlguard_backend.store.samples import SORT_FIELDS, SampleQuery

router = APIRouter(prefix="/v1", tags=["samples"], responses=ERROR_RESPONSES)
Order = Literal["asc", "desc"]
SAMPLES_BODY_EXAMPLE = {
    "batch_id": "9c1d2e3f4a5b6c7d",
    "samples": [
        {
            "step": 12,
            "index": 0,
            "prompt": "3 + 4 =",
            "response": "7<eos>",
            "reward": 1.0,
            "kl": 0.02,
            "tokens": {"text": ["7", "<eos>"], "kl": [0.01, 0.03]},
        }
    ],
}


@router.post(
    "/runs/{run_id}/samples",
    response_model=SampleAck,
    dependencies=[WRITE],
    openapi_extra=documented_body(SampleBatchIn, SAMPLES_BODY_EXAMPLE),
)
async def ingest_samples(
    run_id: str, request: Request, db: WriterDep, settings: SettingsDep
) -> Response:
    """Store one batch of samples (gzip accepted) completely or not at all; a known batch id is
    a no-op."""
    body = await read_body(request, settings.max_batch_bytes)
    encoding = request.headers.get("content-encoding")

    def parse_and_store() -> SampleAck:
        raw = ingest.decode_body(body, encoding, settings.max_batch_bytes)
        batch = samples.parse_samples(raw, settings.max_batch_samples)
        return _store_samples(db.factory, settings, run_id, batch, request.app.state.metrics)

    ack = await db.on_write_thread(parse_and_store)
    return Response(ack.model_dump_json(), media_type="application/json")


def _store_samples(
    factory: sessionmaker[Session],
    settings: Settings,
    run_id: str,
    batch: SampleBatchIn,
    metrics: ServiceMetrics,
) -> SampleAck:
    """The unit of work of one samples batch, one commit: the samples, and the signals derived
    from them (stored and fed to the detectors) unless the client logged its own."""

    def store() -> SampleAck:
        with write_session(factory) as session:
            ack = samples.store_samples(session, run_id, batch)
            signals = samples.derived_signals(batch)
            if signals is not None and not ack.duplicate:
                store_and_detect(session, settings, run_id, signals, metrics)
            session.commit()
            return ack

    def replayed() -> SampleAck:
        return SampleAck(batch_id=batch.batch_id, duplicate=True, samples=len(batch.samples))

    return once_per_batch_id(factory, run_id, batch.batch_id, store, replayed)


def _ranges(request: Request) -> dict[str, tuple[float | None, float | None]]:
    """``min_<field>`` / ``max_<field>`` query parameters, by field."""
    ranges: dict[str, tuple[float | None, float | None]] = {}
    for name, raw in request.query_params.items():
        bound, _, field = name.partition("_")
        if bound not in ("min", "max") or not field:
            continue
        if field not in samples.FILTER_COLUMNS:
            raise InvalidField(
                ["query", name],
                f"cannot filter on {field!r}; use min_/max_ with one of "
                f"{', '.join(samples.FILTER_COLUMNS)}",
            )
        try:
            value = float(raw)
        except ValueError:
            raise InvalidField(["query", name], f"{name}={raw!r} is not a number") from None
        low, high = ranges.get(field, (None, None))
        ranges[field] = (value, high) if bound == "min" else (low, value)
    return ranges


@router.get("/runs/{run_id}/samples", response_model=SampleList, dependencies=[READ])
async def read_run_samples(
    run: RunRefDep,
    request: Request,
    db: DatabaseDep,
    settings: SettingsDep,
    step: Annotated[Step | None, Query(description="one step (or use from_step/to_step)")] = None,
    from_step: Step = 0,
    to_step: Step | None = None,
    split: Annotated[str, Query(description='"train" rollouts or e.g. "validation"')] = "train",
    sort: Annotated[
        str,
        Query(
            description=f"one of {', '.join(SORT_FIELDS)}",
            json_schema_extra={"enum": list(SORT_FIELDS)},  # refused below, naming the fields
        ),
    ] = "step",
    order: Order = "asc",
    q: Annotated[str | None, Query(min_length=1, description="text in any text field")] = None,
    tokens: Annotated[bool, Query(description="include the per-token arrays")] = False,
    limit: Limit = 100,
    offset: Offset = 0,
) -> Response:
    """Samples of a run; filter any number with ``min_<field>``/``max_<field>`` (e.g.
    ``max_reward=0``), search text with ``q``."""
    if sort not in SORT_FIELDS:
        raise InvalidField(["query", "sort"], f"sort={sort!r}: use one of {', '.join(SORT_FIELDS)}")
    if step is not None:  # one step, within from_step..to_step when those are given too
        from_step = max(from_step, step)
        to_step = step if to_step is None else min(to_step, step)
    query = SampleQuery(
        from_step=from_step,
        to_step=to_step,
        split=split,
        ranges=_ranges(request),
        text=q,
        sort=sort,
        descending=order == "desc",
        limit=limit,
        offset=offset,
        tokens=tokens,
    )

    def read(session: Session) -> bytes:
        run_id = run.resolve(session).id
        found = samples.read_samples(session, run_id, query, settings.max_sample_search_rows)
        return found.model_dump_json().encode()

    return Response(await db.read(read), media_type="application/json")


@router.get("/runs/{run_id}/sample-steps", response_model=SampleStepList, dependencies=[READ])
async def read_sample_steps(
    run: RunRefDep,
    db: DatabaseDep,
    split: Annotated[str, Query(description='"train" rollouts or e.g. "validation"')] = "train",
) -> SampleStepList:
    """The steps that hold samples, with how many each (a step slider's stops)."""

    def read(session: Session) -> SampleStepList:
        run_id = run.resolve(session).id
        steps = [
            SampleStep(step=s, samples=n) for s, n in samples.sample_steps(session, run_id, split)
        ]
        return SampleStepList(data=steps, count=len(steps))

    return await db.read(read)


@router.get("/alerts/{alert_id}/samples", response_model=SampleList, dependencies=[READ])
async def read_alert_samples(
    alert_id: AlertId,
    db: DatabaseDep,
    before: Annotated[int, Query(ge=0, description="also this many steps before the alert")] = 0,
    tokens: bool = False,
    limit: Limit = 100,
    offset: Offset = 0,
) -> Response:
    """The samples of the alert's steps (first_step - before .. last_step), worst reward first."""

    def read(session: Session) -> bytes:
        alert = alerts.get_alert(session, alert_id)
        query = SampleQuery(
            from_step=max(alert.first_step - before, 0),
            to_step=alert.last_step,
            sort="reward",
            limit=limit,
            offset=offset,
            tokens=tokens,
        )
        return samples.read_samples(session, alert.run_id, query).model_dump_json().encode()

    return Response(await db.read(read), media_type="application/json")
