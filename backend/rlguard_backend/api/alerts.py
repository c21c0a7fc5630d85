"""Alerts: per run and across runs, acknowledge and resolve."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from sqlalchemy.orm import Session

from rlguard_backend.api.deps import (
    READ,
    WRITE,
    AlertId,
    DatabaseDep,
    IdentityDep,
    Limit,
    Offset,
    RunRef,
    RunRefDep,
    WriterDep,
    project_filter,
)
from rlguard_backend.detection import alerts
from rlguard_backend.models import utcnow
from rlguard_backend.schemas import (
    ERROR_RESPONSES,
    AlertList,
    AlertPublic,
    AlertStatus,
    AlertUpdate,
    Severity,
)

router = APIRouter(prefix="/v1", tags=["alerts"], responses=ERROR_RESPONSES)


def _alert_list(session: Session, **filters: Any) -> AlertList:
    found, count = alerts.list_alerts(session, **filters)
    return AlertList(data=alerts.to_publics(session, found), count=count)


@router.get("/runs/{run_id}/alerts", response_model=AlertList, dependencies=[READ])
async def read_run_alerts(
    run: RunRefDep,
    db: DatabaseDep,
    status: AlertStatus | None = None,
    severity: Severity | None = None,
    detector: str | None = None,
    limit: Limit = 500,
    offset: Offset = 0,
) -> AlertList:
    """A run's alerts, filtered by status, severity and detector, one page at a time."""
    filters = dict(status=status, severity=severity, detector=detector, limit=limit, offset=offset)

    def read(session: Session) -> AlertList:
        run_id = run.resolve(session).id
        return _alert_list(session, run_id=run_id, archived=None, **filters)

    return await db.read(read)


@router.get("/alerts", response_model=AlertList, dependencies=[READ])
async def read_alerts(
    db: DatabaseDep,
    identity: IdentityDep,
    project: str | None = None,
    run_id: Annotated[str | None, Query(description="one run's, by its id or name")] = None,
    status: AlertStatus | None = None,
    severity: Severity | None = None,
    detector: str | None = None,
    archived: Annotated[bool, Query(description="true: the alerts of archived runs")] = False,
    limit: Limit = 100,
    offset: Offset = 0,
) -> AlertList:
    """Alerts across runs (a token limited to a project sees its own); archived on request."""
    filters = dict(status=status, severity=severity, detector=detector, limit=limit, offset=offset)
    filters["archived"] = archived
    project = project_filter(identity, project)

    def read(session: Session) -> AlertList:
        run = None if run_id is None else RunRef(run_id, project).resolve(session).id
        return _alert_list(session, run_id=run, project=project, **filters)

    return await db.read(read)


@router.get("/alerts/{alert_id}", response_model=AlertPublic, dependencies=[READ])
async def read_alert(alert_id: AlertId, db: DatabaseDep) -> AlertPublic:
    """One alert by id: its run, rule, steps, message, evidence and advice."""
    return await db.read(
        lambda session: alerts.to_publics(session, [alerts.get_alert(session, alert_id)])[0]
    )


@router.patch("/alerts/{alert_id}", response_model=AlertPublic, dependencies=[WRITE])
async def update_alert(alert_id: AlertId, data: AlertUpdate, db: WriterDep) -> AlertPublic:
    """Acknowledge an alert (it stays open) or resolve it by hand."""

    def update(session: Session) -> AlertPublic:
        alert = alerts.get_alert(session, alert_id)
        if data.acknowledged is not None:
            alert.acknowledged = data.acknowledged
        if data.status is not None:
            alert.status = data.status
        alert.updated_at = utcnow()
        session.commit()
        return alerts.to_publics(session, [alert])[0]

    return await db.write(update)
