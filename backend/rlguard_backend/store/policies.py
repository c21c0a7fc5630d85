"""A project's command policies: stop (or checkpoint) a run when an alert reaches a severity
and persists some steps; applied on ingest, backtested over the project's stored alerts.

An alert "persists N steps" once the run, with the alert still open, reaches
``first_step + N`` (a resolved alert persisted up to its ``last_step``): the policy acts at that
step. A dry-run policy records the command it would send (``dry_run``) and sends none.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from rlguard_backend.core.errors import NotFound
from rlguard_backend.models import Alert, CommandPolicy, Run, RunCommand, as_utc, utcnow
from rlguard_backend.schemas import PolicyBacktest, PolicyHit, PolicyIn, PolicyPublic
from rlguard_backend.store import commands

SEVERITIES = ("info", "warn", "critical")


def create(session: Session, project: str, data: PolicyIn, by: str) -> CommandPolicy:
    """Store a policy for ``project``; it applies from the next batch of any of its runs."""
    policy = CommandPolicy(project=project, created_by=by, created_at=utcnow(), **data.model_dump())
    session.add(policy)
    session.flush()
    return policy


def of_project(session: Session, project: str) -> list[CommandPolicy]:
    """The project's policies, oldest first; 404 for a project with neither runs nor policies."""
    query = select(CommandPolicy).where(CommandPolicy.project == project)
    found = list(session.scalars(query.order_by(CommandPolicy.id)))
    if not found:
        _known(session, project)
    return found


def _known(session: Session, project: str) -> None:
    """404 unless the project holds a run (a policy may also come before its runs)."""
    if session.scalar(select(Run.id).where(Run.project == project).limit(1)) is None:
        raise NotFound(
            f"project {project!r} has no runs and no policies; GET /api/v1/projects lists "
            "the projects (a policy may be added to a project before its first run)"
        )


def get(session: Session, project: str, policy_id: int) -> CommandPolicy:
    """The project's policy, or a 404 saying where to find its policies."""
    policy = session.get(CommandPolicy, policy_id)
    if policy is None or policy.project != project:
        raise NotFound(
            f"project {project!r} has no policy {policy_id}; "
            f"GET /api/v1/projects/{project}/policies lists them"
        )
    return policy


def delete(session: Session, project: str, policy_id: int) -> None:
    """Remove a policy; commands it sent stay in their runs' histories."""
    session.delete(get(session, project, policy_id))


def to_public(policy: CommandPolicy) -> PolicyPublic:
    """The served form of a policy."""
    return PolicyPublic(
        id=policy.id,
        project=policy.project,
        alert=policy.alert,
        severity=policy.severity,  # type: ignore[arg-type]
        persist_steps=policy.persist_steps,
        action=policy.action,  # type: ignore[arg-type]
        dry_run=policy.dry_run,
        created_by=policy.created_by,
        created_at=as_utc(policy.created_at),
    )


def acting_step(
    policy: CommandPolicy | PolicyIn, alert: Alert, run_last_step: int | None
) -> int | None:
    """The step at which ``policy`` acts on ``alert``, None when it never does."""
    named = policy.alert in (alert.detector, f"{alert.detector}/{alert.key}")
    severe = SEVERITIES.index(alert.severity) >= SEVERITIES.index(policy.severity)
    held_until = alert.last_step
    if alert.status == "open" and run_last_step is not None:
        held_until = max(held_until, run_last_step)
    step = alert.first_step + policy.persist_steps
    return step if named and severe and step <= held_until else None


def apply(session: Session, run_id: str) -> list[RunCommand]:
    """The commands the run's project's policies send (or, dry, record) after a batch."""
    rows = session.execute(
        select(CommandPolicy, Run)
        .join(Run, Run.project == CommandPolicy.project)
        .where(Run.id == run_id, Run.status == "running")
    ).all()
    if not rows:
        return []
    alerts = list(
        session.scalars(select(Alert).where(Alert.run_id == run_id, Alert.status == "open"))
    )
    sent = []
    for policy, run in rows:
        hit = next((a for a in alerts if acting_step(policy, a, run.last_step) is not None), None)
        if hit is None or _already_asked(session, run_id, policy):
            continue
        held = (run.last_step or hit.first_step) - hit.first_step
        reason = (
            f"{hit.severity} {hit.detector}/{hit.key} open for {held} step(s) (policy "
            f"{policy.id}: {policy.alert} at {policy.severity} or worse for "
            f"{policy.persist_steps} step(s))"
        )
        sent.append(
            commands.record(
                session,
                run,
                policy.action,
                reason,
                f"policy {policy.id}",
                hit.id,
                policy.id,
                policy.dry_run,
            )
        )
    return sent


def _already_asked(session: Session, run_id: str, policy: CommandPolicy) -> bool:
    """A policy acts once a run; and not while the same command waits from someone else."""
    mine = select(RunCommand.id).where(
        RunCommand.run_id == run_id, RunCommand.policy_id == policy.id
    )
    if session.scalar(mine.limit(1)) is not None:
        return True
    return not policy.dry_run and commands.unacted(session, run_id, policy.action) is not None


def backtest(session: Session, project: str, policy: PolicyIn) -> PolicyBacktest:
    """Where ``policy`` would have acted on the project's stored runs, from their alerts."""
    _known(session, project)
    runs = list(session.scalars(select(Run).where(Run.project == project).order_by(Run.id)))
    hits = []
    for run in runs:
        found = [
            (step, alert)
            for alert in session.scalars(select(Alert).where(Alert.run_id == run.id))
            if (step := acting_step(policy, alert, run.last_step)) is not None
        ]
        if not found:
            continue
        step, alert = min(found, key=lambda pair: pair[0])
        saved = max((run.last_step or step) - step, 0)
        hits.append(
            PolicyHit(
                run_id=run.id,
                run_name=run.name,
                alert_id=alert.id,
                step=step,
                last_step=run.last_step,
                steps_saved=saved,
            )
        )
    return PolicyBacktest(
        policy=policy,
        project=project,
        runs=len(runs),
        data=hits,
        count=len(hits),
        steps_saved=sum(h.steps_saved for h in hits),
    )
