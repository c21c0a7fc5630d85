"""A project's command policies: list, add, remove, and backtest one over its stored runs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, status
from sqlalchemy.orm import Session

from rlguard_backend.api.deps import READ, WRITE, DatabaseDep, IdentityDep, WriterDep
from rlguard_backend.schemas import (
    ERROR_RESPONSES,
    PolicyBacktest,
    PolicyIn,
    PolicyList,
    PolicyPublic,
)
from rlguard_backend.store import policies

router = APIRouter(prefix="/v1/projects", tags=["policies"], responses=ERROR_RESPONSES)
PolicyId = Annotated[int, Path(ge=1, le=2**31 - 1)]
# A project a policy may name before any of its runs exists: any name but "." and "..", which a
# path cannot carry unchanged.
ProjectName = Annotated[
    str,
    Path(min_length=1, max_length=128, pattern=r"^([^.\x00/]|\.[^.\x00/]|\.\.[^\x00/])[^\x00/]*$"),
]


@router.get("/{project}/policies", response_model=PolicyList, dependencies=[READ])
async def read_policies(project: ProjectName, db: DatabaseDep) -> PolicyList:
    """The project's policies: which alert, at which severity, held how long, does what."""

    def read(session: Session) -> PolicyList:
        found = [policies.to_public(p) for p in policies.of_project(session, project)]
        return PolicyList(data=found, count=len(found))

    return await db.read(read)


@router.post(
    "/{project}/policies",
    response_model=PolicyPublic,
    status_code=status.HTTP_201_CREATED,
    dependencies=[WRITE],
)
async def create_policy(
    project: ProjectName, data: PolicyIn, identity: IdentityDep, db: WriterDep
) -> PolicyPublic:
    """Stop (or checkpoint) the project's runs when ``alert`` reaches ``severity`` and persists
    ``persist_steps``; the service applies it on ingest, once a run. ``dry_run`` only records."""

    def create(session: Session) -> PolicyPublic:
        policy = policies.create(session, project, data, identity.name)
        session.commit()
        return policies.to_public(policy)

    return await db.write(create)


@router.delete("/{project}/policies/{policy_id}", response_model=PolicyPublic, dependencies=[WRITE])
async def delete_policy(project: ProjectName, policy_id: PolicyId, db: WriterDep) -> PolicyPublic:
    """Remove a policy (its commands stay in the runs' histories); answers what was removed."""

    def remove(session: Session) -> PolicyPublic:
        gone = policies.to_public(policies.get(session, project, policy_id))
        policies.delete(session, project, policy_id)
        session.commit()
        return gone

    return await db.write(remove)


@router.post("/{project}/policy-backtest", response_model=PolicyBacktest, dependencies=[READ])
async def backtest_policy(project: ProjectName, data: PolicyIn, db: DatabaseDep) -> PolicyBacktest:
    """Which of the project's stored runs ``data`` would have acted on, at which step, and
    how many steps that saves; nothing is written."""
    return await db.read(lambda session: policies.backtest(session, project, data))
