"""Commands to a run's trainer: stop, checkpoint, their history and the hook's reports."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Query, status
from sqlalchemy.orm import Session

from rlguard_backend.api.deps import (
    READ,
    WRITE,
    DatabaseDep,
    IdentityDep,
    RunRef,
    RunRefDep,
    WriterDep,
)
from rlguard_backend.detection import feed
from rlguard_backend.schemas import (
    ERROR_RESPONSES,
    CommandIn,
    CommandList,
    CommandPublic,
    CommandUpdate,
)
from rlguard_backend.store import commands

router = APIRouter(prefix="/v1/runs", tags=["commands"], responses=ERROR_RESPONSES)

OptionalCommand = Annotated[CommandIn | None, Body()]
CommandId = Annotated[int, Path(ge=1, le=2**31 - 1)]


async def _ask(
    kind: str, ref: RunRef, data: CommandIn | None, by: str, db: WriterDep
) -> CommandPublic:
    def ask(session: Session) -> CommandPublic:
        run = feed.run_for_update(session, ref.resolve(session).id)
        command = commands.request(session, run, kind, data or CommandIn(), by)
        session.commit()
        return commands.to_public(command)

    return await db.write(ask)


@router.post(
    "/{run_id}/stop",
    response_model=CommandPublic,
    status_code=status.HTTP_202_ACCEPTED,
    dependencies=[WRITE],
)
async def stop_run(
    run: RunRefDep, identity: IdentityDep, db: WriterDep, data: OptionalCommand = None
) -> CommandPublic:
    """Ask the run's trainer to stop (the run named by its id, or its name with ``?project=``
    when several projects hold one): its hook receives the command with its next batch (or
    its poll, within ~5 s when it logs less often) and sets ``run.should_stop``."""
    return await _ask("stop", run, data, identity.name, db)


@router.post(
    "/{run_id}/checkpoint",
    response_model=CommandPublic,
    status_code=status.HTTP_202_ACCEPTED,
    dependencies=[WRITE],
)
async def checkpoint_run(
    run: RunRefDep, identity: IdentityDep, db: WriterDep, data: OptionalCommand = None
) -> CommandPublic:
    """Ask the run's trainer to save a checkpoint (``run.checkpoint_request()``)."""
    return await _ask("checkpoint", run, data, identity.name, db)


@router.get("/{run_id}/commands", response_model=CommandList, dependencies=[READ])
async def read_commands(
    run: RunRefDep,
    db: DatabaseDep,
    pending: Annotated[bool, Query(description="only those the hook has not received")] = False,
) -> CommandList:
    """The run's commands, oldest first: who asked, why, when delivered and acted on."""

    def read(session: Session) -> CommandList:
        run_id = run.resolve(session).id
        found = commands.pending(session, run_id) if pending else commands.history(session, run_id)
        data = [commands.to_public(c) for c in found]
        return CommandList(data=data, count=len(data))

    return await db.read(read)


@router.patch("/{run_id}/commands/{command_id}", response_model=CommandPublic, dependencies=[WRITE])
async def report_command(
    run_id: str, command_id: CommandId, data: CommandUpdate, db: WriterDep
) -> CommandPublic:
    """The trainer's hook reports a command received (``delivered``) or acted on (``acted``,
    at ``step``); each time is recorded once, so a repeated report changes nothing."""

    def report(session: Session) -> CommandPublic:
        command = commands.report(session, run_id, command_id, data)
        session.commit()
        return commands.to_public(command)

    return await db.write(report)
