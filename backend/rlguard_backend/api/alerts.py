"""Alerts: per run and across runs, acknowledge and resolve."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from rlguard_backend import alerts, repository
from rlguard_backend.api.deps import SessionDep, WriteSessionDep
from rlguard_backend.models import utcnow
from rlguard_backend.schemas import AlertList, AlertPublic, AlertStatus, AlertUpdate, Severity

router = APIRouter(prefix="/v1", tags=["alerts"])
Limit = Annotated[int, Query(ge=1, le=1000)]
Offset = Annotated[int, Query(ge=0)]


@router.get("/runs/{run_id}/alerts", response_model=AlertList)
def read_run_alerts(
    run_id: str,
    session: SessionDep,
    status: AlertStatus | None = None,
    severity: Severity | None = None,
    detector: str | None = None,
    limit: Limit = 500,
    offset: Offset = 0,
) -> AlertList:
    repository.get_run(session, run_id)
    found, count = alerts.list_alerts(
        session,
        run_id=run_id,
        status=status,
        severity=severity,
        detector=detector,
        limit=limit,
        offset=offset,
    )
    return AlertList(data=[alerts.to_public(a) for a in found], count=count)


@router.get("/alerts", response_model=AlertList)
def read_alerts(
    session: SessionDep,
    project: str | None = None,
    run_id: str | None = None,
    status: AlertStatus | None = None,
    severity: Severity | None = None,
    detector: str | None = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> AlertList:
    found, count = alerts.list_alerts(
        session,
        run_id=run_id,
        project=project,
        status=status,
        severity=severity,
        detector=detector,
        limit=limit,
        offset=offset,
    )
    return AlertList(data=[alerts.to_public(a) for a in found], count=count)


@router.patch("/alerts/{alert_id}", response_model=AlertPublic)
def update_alert(alert_id: int, data: AlertUpdate, session: WriteSessionDep) -> AlertPublic:
    """Acknowledge an alert (it stays open) or resolve it by hand."""
    alert = alerts.get_alert(session, alert_id)
    if data.acknowledged is not None:
        alert.acknowledged = data.acknowledged
    if data.status is not None:
        alert.status = data.status
    alert.updated_at = utcnow()
    session.commit()
    return alerts.to_public(alert)
