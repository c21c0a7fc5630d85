"""Commands to a run's trainer: asked over REST, carried to its hook, acknowledged, acted on.

A command is pending until the hook receives it (in the reply to a batch or to its poll),
delivered until the trainer acts on it, then acted. One unacted command of a kind at a time.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from rlguard_backend.core.errors import Conflict, InvalidField, NotFound
from rlguard_backend.models import Alert, Run, RunCommand, as_utc, utcnow
from rlguard_backend.schemas import (
    CommandIn,
    CommandPublic,
    CommandState,
    CommandUpdate,
    Marker,
)


def request(session: Session, run: Run, kind: str, data: CommandIn, by: str) -> RunCommand:
    """Record a command for ``run`` (locked by the caller); 409 for a run that is not
    running or one that already has this kind of command waiting."""
    if run.status != "running":
        raise Conflict(
            f"run {run.id!r} is {run.status}: no trainer is there to {kind}; "
            "commands go to running runs only"
        )
    waiting = unacted(session, run.id, kind)
    if waiting is not None:
        raise Conflict(f"run {run.id!r} already has a {kind} waiting: {describe(waiting)}")
    if data.alert_id is not None:
        _check_alert(session, run.id, data.alert_id)
    if data.on_behalf_of is not None:  # beside the token's name: no token passes as another
        by = f"{data.on_behalf_of} (via {by})"
    return record(session, run, kind, data.reason, by, data.alert_id)


def record(
    session: Session,
    run: Run,
    kind: str,
    reason: str | None,
    by: str,
    alert_id: int | None = None,
    policy_id: int | None = None,
    dry_run: bool = False,
) -> RunCommand:
    """Store a command at the run's current step (checked by the caller)."""
    command = RunCommand(
        run_id=run.id,
        kind=kind,
        reason=reason,
        requested_by=by,
        alert_id=alert_id,
        requested_at=utcnow(),
        requested_step=run.last_step,
        policy_id=policy_id,
        dry_run=dry_run,
    )
    session.add(command)
    session.flush()
    return command


def describe(command: RunCommand) -> str:
    """One sentence on where a command stands, for a 409 or a log line."""
    asked = (
        f"command {command.id}, asked by {command.requested_by} at {_time(command.requested_at)}"
    )
    if command.delivered_at is None:
        return f"{asked}; it reaches the trainer with the hook's next batch or poll"
    return (
        f"{asked}, delivered at {_time(command.delivered_at)}; the trainer acts at its next check"
    )


def _time(moment: datetime) -> str:
    return as_utc(moment).isoformat(timespec="seconds")


def unacted(session: Session, run_id: str, kind: str) -> RunCommand | None:
    """The run's oldest command of ``kind`` sent and not acted on yet, if any."""
    return session.scalars(
        select(RunCommand)
        .where(
            RunCommand.run_id == run_id,
            RunCommand.kind == kind,
            RunCommand.acted_at.is_(None),
            RunCommand.dry_run.is_(False),
        )
        .order_by(RunCommand.id)
        .limit(1)
    ).first()


def _check_alert(session: Session, run_id: str, alert_id: int) -> None:
    alert_run = session.scalar(select(Alert.run_id).where(Alert.id == alert_id))
    if alert_run != run_id:
        raise InvalidField(
            ["body", "alert_id"],
            f"alert {alert_id} is not an alert of run {run_id!r}; "
            f"name one of its alerts (GET /api/v1/runs/{run_id}/alerts) or leave alert_id out",
        )


def pending(session: Session, run_id: str) -> list[RunCommand]:
    """Commands the run's hook has not received yet, oldest first."""
    return list(
        session.scalars(
            select(RunCommand)
            .where(
                RunCommand.run_id == run_id,
                RunCommand.delivered_at.is_(None),
                RunCommand.dry_run.is_(False),
            )
            .order_by(RunCommand.id)
        )
    )


def history(session: Session, run_id: str) -> list[RunCommand]:
    """Every command sent to the run, oldest first."""
    return list(
        session.scalars(
            select(RunCommand).where(RunCommand.run_id == run_id).order_by(RunCommand.id)
        )
    )


def report(session: Session, run_id: str, command_id: int, update: CommandUpdate) -> RunCommand:
    """The hook's report: received (delivered) and/or acted on; each time is set once."""
    command = session.get(RunCommand, command_id)
    if command is None or command.run_id != run_id:
        raise NotFound(
            f"run {run_id!r} has no command {command_id}; "
            f"GET /api/v1/runs/{run_id}/commands lists its commands"
        )
    now = utcnow()
    if (update.delivered or update.acted) and command.delivered_at is None:
        command.delivered_at = now
    if update.acted and command.acted_at is None:
        command.acted_at = now
        command.acted_step = update.step
    return command


def to_public(command: RunCommand) -> CommandPublic:
    """The served form of a command, with its state."""
    state: CommandState = "pending"
    if command.acted_at is not None:
        state = "acted"
    elif command.delivered_at is not None:
        state = "delivered"
    return CommandPublic(
        id=command.id,
        run_id=command.run_id,
        kind=command.kind,  # type: ignore[arg-type]
        state=state,
        reason=command.reason,
        requested_by=command.requested_by,
        alert_id=command.alert_id,
        requested_at=as_utc(command.requested_at),
        requested_step=command.requested_step,
        delivered_at=as_utc(command.delivered_at) if command.delivered_at else None,
        acted_at=as_utc(command.acted_at) if command.acted_at else None,
        acted_step=command.acted_step,
        policy_id=command.policy_id,
        dry_run=command.dry_run,
    )


def markers(session: Session, run_id: str) -> list[Marker]:
    """Each command as a chart marker, at the step it was acted on (or asked at)."""
    found = []
    for command in history(session, run_id):
        step = command.acted_step if command.acted_step is not None else command.requested_step
        if step is None:
            continue
        why = f": {command.reason}" if command.reason else ""
        would = "would " if command.dry_run else ""
        label = f"{would}{command.kind} by {command.requested_by}{why}"
        found.append(Marker(step=step, kind=command.kind, label=label))  # type: ignore[arg-type]
    return found
