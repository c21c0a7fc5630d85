"""Runs: create-or-resume, list, read, update, heartbeat, rewind."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response, status
from sqlalchemy import select
from sqlalchemy.orm import Session

from rlguard_backend import detection, ingest, repository
from rlguard_backend.api.bodies import documented_body
from rlguard_backend.api.deps import (
    ADMIN,
    READ,
    WRITE,
    DatabaseDep,
    Limit,
    Offset,
    SettingsDep,
    WriterDep,
)
from rlguard_backend.config import Settings
from rlguard_backend.errors import InvalidField, NotFound
from rlguard_backend.models import Run
from rlguard_backend.schemas import (
    ERROR_RESPONSES,
    DetectRequest,
    DetectResult,
    Heartbeat,
    HeartbeatIn,
    RunCreate,
    RunList,
    RunPublic,
    RunRewind,
    RunsDeleted,
    RunStatus,
    RunUpdate,
)

router = APIRouter(prefix="/v1/runs", tags=["runs"], responses=ERROR_RESPONSES)
projects = APIRouter(prefix="/v1/projects", tags=["runs"], responses=ERROR_RESPONSES)


def _public(session: Session, run_id: str) -> RunPublic:
    run = repository.get_run(session, run_id)
    return repository.to_public(run, repository.run_tags(session, [run.id])[run.id])


@router.post(
    "",
    response_model=RunPublic,
    status_code=status.HTTP_201_CREATED,
    dependencies=[WRITE],
    responses={200: {"model": RunPublic, "description": "resumed: the run existed"}},
)
async def create_run(
    data: RunCreate, db: WriterDep, settings: SettingsDep, response: Response
) -> RunPublic:
    """Create a run with a client-chosen id, or resume it (200) when it exists."""
    _check_config(data.config, settings)

    def create_or_resume(session: Session) -> tuple[RunPublic, bool]:
        run, created = repository.create_or_resume_run(session, data)
        if data.resume_from_step is not None and not created:
            detection.backtest(session, run, settings, {}, apply=True)
        session.commit()
        return _public(session, run.id), created

    run, created = await db.write(create_or_resume)
    if not created:
        response.status_code = status.HTTP_200_OK
    return run


def _check_config(config: dict[str, Any], settings: Settings) -> None:
    try:
        detection.check_run_config(config, settings)
    except ValueError as exc:
        raise InvalidField(["body", "config"], f"run config: {exc}") from exc


@router.delete("/{run_id}", response_model=RunsDeleted, dependencies=[ADMIN])
async def delete_run(run_id: str, db: WriterDep) -> RunsDeleted:
    """Delete a run and everything stored for it (points, alerts, detector state, samples)."""

    def remove(session: Session) -> RunsDeleted:
        repository.get_run(session, run_id)
        deleted = repository.delete_runs(session, [run_id])
        session.commit()
        return RunsDeleted(deleted=deleted, run_ids=[run_id])

    return await db.write(remove)


@projects.delete("/{project}", response_model=RunsDeleted, dependencies=[ADMIN])
async def delete_project(project: str, db: WriterDep) -> RunsDeleted:
    """Delete every run of a project with everything stored for them."""

    def remove(session: Session) -> RunsDeleted:
        run_ids = list(session.scalars(select(Run.id).where(Run.project == project)))
        if not run_ids:
            raise NotFound(f"project {project!r} has no runs; GET /api/v1/runs lists them")
        deleted = repository.delete_runs(session, run_ids)
        session.commit()
        return RunsDeleted(deleted=deleted, run_ids=sorted(run_ids))

    return await db.write(remove)


@router.get("", response_model=RunList, dependencies=[READ])
async def list_runs(
    db: DatabaseDep,
    project: str | None = None,
    status: RunStatus | None = None,
    tag: str | None = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> RunList:
    def read(session: Session) -> RunList:
        runs, count = repository.list_runs(
            session, project=project, status=status, tag=tag, limit=limit, offset=offset
        )
        tags = repository.run_tags(session, [r.id for r in runs])
        return RunList(data=[repository.to_public(r, tags[r.id]) for r in runs], count=count)

    return await db.read(read)


@router.get("/{run_id}", response_model=RunPublic, dependencies=[READ])
async def read_run(run_id: str, db: DatabaseDep) -> RunPublic:
    return await db.read(lambda session: _public(session, run_id))


@router.patch("/{run_id}", response_model=RunPublic, dependencies=[WRITE])
async def update_run(
    run_id: str, data: RunUpdate, db: WriterDep, settings: SettingsDep
) -> RunPublic:
    """Set status, name or summary; a run that ends has its last step checked too."""

    def update(session: Session) -> RunPublic:
        run = repository.update_run(session, detection.run_for_update(session, run_id), data)
        if run.status != "running" and settings.detectors_enabled:
            detection.flush_pending(session, run, settings)
        session.commit()
        return _public(session, run_id)

    return await db.write(update)


HEARTBEAT_EXAMPLE = {"drops": {"process": "5f0c9e", "points": 1200, "steps": 0, "samples": 64}}


@router.post(
    "/{run_id}/heartbeat",
    response_model=Heartbeat,
    dependencies=[WRITE],
    openapi_extra=documented_body(HeartbeatIn, HEARTBEAT_EXAMPLE, required=False),
)
async def heartbeat(run_id: str, request: Request, db: WriterDep) -> Heartbeat:
    """Liveness; ``drops`` records what a trainer process dropped without delivering. The
    body is optional and read as JSON whatever its Content-Type (older clients send none)."""
    raw = await request.body()
    drops = ingest.parse_body(HeartbeatIn, raw, "drops").drops if raw.strip() else None

    def beat(session: Session) -> Heartbeat:
        run = repository.heartbeat(session, repository.get_run(session, run_id), drops)
        session.commit()
        assert run.last_heartbeat_at is not None
        return Heartbeat(
            id=run.id,
            status=run.status,  # type: ignore[arg-type]
            last_heartbeat_at=run.last_heartbeat_at,
            dropped=repository.dropped_total(run),
        )

    return await db.write(beat)


@router.post("/{run_id}/detect", response_model=DetectResult, dependencies=[WRITE])
async def detect_run(
    run_id: str, data: DetectRequest, db: WriterDep, settings: SettingsDep
) -> DetectResult:
    """Backtest: re-run the detectors over the stored points, live alerts untouched unless asked."""

    def backtest(session: Session) -> DetectResult:
        run = detection.run_for_update(session, run_id)
        try:
            result = detection.backtest(session, run, settings, data.thresholds, data.apply)
        except ValueError as exc:
            raise InvalidField(["body", "thresholds"], str(exc)) from exc
        session.commit()
        return result

    return await db.write(backtest)


@router.post("/{run_id}/rewind", response_model=RunPublic, dependencies=[WRITE])
async def rewind_run(
    run_id: str, data: RunRewind, db: WriterDep, settings: SettingsDep
) -> RunPublic:
    """Supersede the points after ``resume_from_step``; the restarted trainer rewrites them.

    The detectors are replayed over what remains, so their state and alerts match the rewind.
    """

    def rewind(session: Session) -> RunPublic:
        run = repository.rewind_run(
            session, detection.run_for_update(session, run_id), data.resume_from_step
        )
        detection.backtest(session, run, settings, {}, apply=True)
        session.commit()
        return _public(session, run_id)

    return await db.write(rewind)
