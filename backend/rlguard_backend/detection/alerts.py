"""Alert lifecycle in storage: detector events become alert rows and webhook outbox entries."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import orjson
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rlguard_backend.core.config import Webhook
from rlguard_backend.core.errors import NotFound
from rlguard_backend.detection.webhook_messages import alert_message
from rlguard_backend.models import Alert, Run, StoredWebhook, WebhookDelivery, as_utc, utcnow
from rlguard_backend.schemas import AlertPublic
from rlguard_backend.stability import AlertEvent
from rlguard_backend.store import sql


def to_public(alert: Alert, run_name: str | None, project: str) -> AlertPublic:
    """An alert row as the API answers it (times in UTC), with its run's name and project."""
    return AlertPublic(
        id=alert.id,
        run_id=alert.run_id,
        run_name=run_name,
        project=project,
        detector=alert.detector,
        key=alert.key,
        severity=alert.severity,  # type: ignore[arg-type]
        status=alert.status,  # type: ignore[arg-type]
        secondary=alert.secondary,
        acknowledged=alert.acknowledged,
        closed_with_run=alert.closed_with_run,
        first_step=alert.first_step,
        last_step=alert.last_step,
        message=alert.message,
        evidence=alert.evidence or {},
        advice=alert.advice or [],
        created_at=as_utc(alert.created_at),
        updated_at=as_utc(alert.updated_at),
    )


def to_publics(session: Session, found: Sequence[Alert]) -> list[AlertPublic]:
    """Alert rows as the API answers them, their runs' names and projects read in one query."""
    if not found:
        return []  # a quiet batch reads no run
    run_ids = {alert.run_id for alert in found}
    query = select(Run.id, Run.name, Run.project).where(Run.id.in_(run_ids))
    runs = {run_id: (name, project) for run_id, name, project in session.execute(query)}
    return [to_public(alert, *runs[alert.run_id]) for alert in found]


_UPDATE_OPEN = (
    "UPDATE alerts SET severity = ?, message = ?, evidence = ?, advice = ?, secondary = ?, "
    "last_step = ?, updated_at = ? WHERE run_id = ? AND detector = ? AND key = ? "
    "AND status = 'open'"
)


def latest_updates(events: Iterable[AlertEvent]) -> list[AlertEvent]:
    """The events without the "update"s that a later update or escalation of the same alert
    among them overwrites (every field of the stored alert): stored, both lists end the same.
    """
    later: set[tuple[str, str]] = set()  # alerts whose every field a later event rewrites
    kept: list[AlertEvent] = []
    for event in reversed(list(events)):
        slot = (event.detector, event.key)
        if event.action == "update" and slot in later:
            continue
        kept.append(event)
        if event.action in ("update", "escalate"):
            later.add(slot)
        else:
            later.discard(slot)
    kept.reverse()
    return kept


def update_open(session: Session, run_id: str, events: Iterable[AlertEvent]) -> list[AlertEvent]:
    """Store "update" events (an open alert's refreshed message and evidence) with one plain
    UPDATE each, as apply_events would store them; returns the events whose alert is not open
    in the database (resolved over REST meanwhile): apply_events opens those again.

    The usual event of a batch: an alert that keeps firing is refreshed every 50 steps. Use it
    before the session has loaded the run's alerts as objects (they would not see the UPDATE).
    """
    left = []
    now = utcnow()
    for event in events:
        assert event.action == "update", event.action
        params = (
            event.severity,
            event.message,
            orjson.dumps(event.evidence).decode(),  # json_safe: no non-finite floats
            orjson.dumps(event.advice).decode(),
            event.secondary,
            event.last_step,
            now,
            run_id,
            event.detector,
            event.key,
        )
        if not sql.execute(session, _UPDATE_OPEN, params):
            left.append(event)
    return left


def apply_events(
    session: Session,
    run_id: str,
    events: Iterable[AlertEvent],
    webhooks: Sequence[Webhook] | None,
) -> list[Alert]:
    """Store detector events; returns the alerts opened or escalated (for the batch answer).

    Each change is queued for ``webhooks`` (the server-wide ones) and the stored hooks of the
    run's project; ``None``: for no hook at all (a backtest's replay).

    The run's open alerts are read once per batch, and the session is flushed only where an
    outbox row needs its alert's id: a batch of an alerting run costs one query, not one
    query and one flush per event. The run and its stored hooks are loaded only at the first
    change, once.
    """
    events = list(events)
    if not events:
        return []
    run: Run | None = None
    stored: list[StoredWebhook] = []
    query = select(Alert).where(Alert.run_id == run_id, Alert.status == "open")
    current = {(alert.detector, alert.key): alert for alert in session.scalars(query)}
    changed: dict[int, Alert] = {}  # by object identity: new alerts have no id before a flush
    for event in events:
        slot = (event.detector, event.key)
        alert = current.get(slot)
        if alert is None:
            if event.action == "resolve":
                continue
            alert = Alert(
                run_id=run_id,
                detector=event.detector,
                key=event.key,
                status="open",
                acknowledged=False,
                created_at=utcnow(),
            )
            session.add(alert)
            current[slot] = alert
            change = "opened"
        else:
            change = {"escalate": "escalated", "resolve": "resolved"}.get(event.action, "")
        _copy_event(alert, event)
        if event.action == "resolve":
            del current[slot]
        if change in ("opened", "escalated"):
            changed.setdefault(id(alert), alert)
        if change and webhooks is not None:
            if run is None:
                run = session.get(Run, run_id)
                assert run is not None  # its row is locked by the batch (or held by the caller)
                stored = _stored_hooks(session, run.project)
            if webhooks or stored:
                session.flush()  # the outbox row names the alert by id
                _enqueue(session, run, alert, change, webhooks, stored)
    session.flush()
    return list(changed.values())


def _copy_event(alert: Alert, event: AlertEvent) -> None:
    if event.action == "resolve":
        alert.status = "resolved"
    else:
        alert.severity, alert.message = event.severity, event.message
        alert.evidence, alert.advice = event.evidence, list(event.advice)
        alert.secondary = event.secondary
    if alert.first_step is None:
        alert.first_step = event.first_step
    alert.last_step = event.last_step
    alert.updated_at = utcnow()


SEVERITY_RANK = {"info": 0, "warn": 1, "critical": 2}


def _wants(hook: Webhook | StoredWebhook, change: str, severity: str) -> bool:
    """Whether a hook takes this change of an alert of this severity."""
    return change in hook.events and SEVERITY_RANK[severity] >= SEVERITY_RANK[hook.min_severity]


def _stored_hooks(session: Session, project: str) -> list[StoredWebhook]:
    """The enabled stored hooks of a project (or of every project)."""
    query = select(StoredWebhook).where(
        StoredWebhook.enabled.is_(True),
        (StoredWebhook.project.is_(None)) | (StoredWebhook.project == project),
    )
    return list(session.scalars(query.order_by(StoredWebhook.id)))


def _enqueue(
    session: Session,
    run: Run,
    alert: Alert,
    change: str,
    webhooks: Sequence[Webhook],
    stored: Sequence[StoredWebhook],
) -> None:
    """One outbox row per state change and target, written in the alert's own transaction.

    The row holds the ``json`` message without its link: the worker adds the link and draws
    the hook's format when it sends it (``detection.webhooks``).
    """
    tag = f"{change}:{alert.severity}:{alert.last_step}"
    targets: list[tuple[str, int | None, str]] = [
        (hook.url, None, hook.format)
        for hook in webhooks
        if hook.project in (None, run.project) and _wants(hook, change, alert.severity)
    ]
    targets += [
        (f"hook:{hook.id}", hook.id, hook.format)
        for hook in stored
        if _wants(hook, change, alert.severity)
    ]
    if not targets:
        return
    public = to_public(alert, run.name, run.project)
    message = alert_message(run, public, f"alert.{change}", "", public.updated_at)
    payload = message.model_dump(mode="json")
    for target, hook_id, fmt in targets:
        session.add(
            WebhookDelivery(
                alert_id=alert.id,
                change=tag,
                target=target,
                hook_id=hook_id,
                format=fmt,
                payload=payload,
                attempts=0,
                next_attempt_at=utcnow(),
                created_at=utcnow(),
            )
        )


def list_alerts(
    session: Session,
    *,
    run_id: str | None = None,
    project: str | None = None,
    status: str | None = None,
    severity: str | None = None,
    detector: str | None = None,
    archived: bool | None = False,
    limit: int = 100,
    offset: int = 0,
) -> tuple[list[Alert], int]:
    """Alerts by filter; ``archived``: False leaves archived runs' out, True only theirs, None
    every run's."""
    query = select(Alert)
    if archived is not None:
        archive = Run.archived_at.is_not(None) if archived else Run.archived_at.is_(None)
        query = query.where(Alert.run_id.in_(select(Run.id).where(archive)))
    filters = {
        Alert.run_id: run_id,
        Alert.status: status,
        Alert.severity: severity,
        Alert.detector: detector,
    }
    for column, value in filters.items():
        if value is not None:
            query = query.where(column == value)
    if project is not None:
        query = query.where(Alert.run_id.in_(select(Run.id).where(Run.project == project)))
    count = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    page = query.order_by(Alert.first_step, Alert.id).limit(limit).offset(offset)
    return list(session.scalars(page)), count


def get_alert(session: Session, alert_id: int) -> Alert:
    """The alert, or 404 naming where the alerts are listed."""
    alert = session.get(Alert, alert_id)
    if alert is None:
        raise NotFound(f"alert {alert_id} not found; GET /api/v1/alerts lists them")
    return alert
