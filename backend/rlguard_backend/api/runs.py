"""Runs: create-or-resume, list, read, update, heartbeat, rewind."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from rlguard_backend import repository
from rlguard_backend.api.deps import SessionDep, WriteSessionDep
from rlguard_backend.schemas import (
    Heartbeat,
    RunCreate,
    RunList,
    RunPublic,
    RunRewind,
    RunStatus,
    RunUpdate,
)

router = APIRouter(prefix="/v1/runs", tags=["runs"])


def _public(session: SessionDep, run_id: str) -> RunPublic:
    run = repository.get_run(session, run_id)
    return repository.to_public(run, repository.run_tags(session, [run.id])[run.id])


@router.post("", response_model=RunPublic, status_code=status.HTTP_201_CREATED)
def create_run(data: RunCreate, session: WriteSessionDep, response: Response) -> RunPublic:
    """Create a run with a client-chosen id, or resume it (200) when it exists."""
    run, created = repository.create_or_resume_run(session, data)
    session.commit()
    if not created:
        response.status_code = status.HTTP_200_OK
    return _public(session, run.id)


@router.get("", response_model=RunList)
def list_runs(
    session: SessionDep,
    project: str | None = None,
    status: RunStatus | None = None,
    tag: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> RunList:
    runs, count = repository.list_runs(
        session, project=project, status=status, tag=tag, limit=limit, offset=offset
    )
    tags = repository.run_tags(session, [r.id for r in runs])
    return RunList(data=[repository.to_public(r, tags[r.id]) for r in runs], count=count)


@router.get("/{run_id}", response_model=RunPublic)
def read_run(run_id: str, session: SessionDep) -> RunPublic:
    return _public(session, run_id)


@router.patch("/{run_id}", response_model=RunPublic)
def update_run(run_id: str, data: RunUpdate, session: WriteSessionDep) -> RunPublic:
    repository.update_run(session, repository.get_run(session, run_id), data)
    session.commit()
    return _public(session, run_id)


@router.post("/{run_id}/heartbeat", response_model=Heartbeat)
def heartbeat(run_id: str, session: WriteSessionDep) -> Heartbeat:
    run = repository.heartbeat(session, repository.get_run(session, run_id))
    session.commit()
    assert run.last_heartbeat_at is not None
    return Heartbeat(id=run.id, status=run.status, last_heartbeat_at=run.last_heartbeat_at)  # type: ignore[arg-type]


@router.post("/{run_id}/rewind", response_model=RunPublic)
def rewind_run(run_id: str, data: RunRewind, session: WriteSessionDep) -> RunPublic:
    """Supersede the points after ``resume_from_step``; the restarted trainer rewrites them."""
    repository.rewind_run(session, repository.get_run(session, run_id), data.resume_from_step)
    session.commit()
    return _public(session, run_id)
