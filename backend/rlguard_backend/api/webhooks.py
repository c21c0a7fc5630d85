"""Webhooks managed over REST (admin scope): add, list, read, change, delete, send a test.

Changes apply to the next message without a restart; the hooks of ``RLGUARD_WEBHOOKS`` are
server-wide and not listed here.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, status
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from rlguard_backend.api.deps import (
    ADMIN,
    MAX_ROW_ID,
    DatabaseDep,
    IdentityDep,
    SettingsDep,
    WriterDep,
)
from rlguard_backend.detection import webhook_messages
from rlguard_backend.detection.webhooks import send
from rlguard_backend.models import StoredWebhook, as_utc, utcnow
from rlguard_backend.schemas import ERROR_RESPONSES, AlertPublic
from rlguard_backend.schemas.webhooks import (
    SECRET_PREFIX_CHARS,
    WebhookCreate,
    WebhookCreated,
    WebhookList,
    WebhookMessage,
    WebhookPublic,
    WebhookRun,
    WebhookTestResult,
    WebhookUpdate,
)
from rlguard_backend.store import webhooks as store

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"], responses=ERROR_RESPONSES)
HookId = Annotated[int, Path(ge=1, le=MAX_ROW_ID, description="the webhook's id")]


def to_public(hook: StoredWebhook) -> WebhookPublic:
    """A hook as listed: its url cut, its secret by its first characters, times in UTC."""
    return WebhookPublic(
        id=hook.id,
        url=webhook_messages.shown_url(hook.url),
        format=hook.format,  # type: ignore[arg-type]
        project=hook.project,
        min_severity=hook.min_severity,  # type: ignore[arg-type]
        events=list(hook.events),
        enabled=hook.enabled,
        secret_prefix=hook.secret[:SECRET_PREFIX_CHARS],
        created_at=as_utc(hook.created_at),
        created_by=hook.created_by,
        updated_at=as_utc(hook.updated_at),
    )


@router.post(
    "", response_model=WebhookCreated, status_code=status.HTTP_201_CREATED, dependencies=[ADMIN]
)
async def create_webhook(
    data: WebhookCreate, identity: IdentityDep, db: WriterDep
) -> WebhookCreated:
    """Add a hook; the answer carries its signing secret, which is never shown again."""

    def create(session: Session) -> WebhookCreated:
        hook = store.add_hook(session, data, identity.name)
        session.commit()
        return WebhookCreated(**to_public(hook).model_dump(), secret=hook.secret)

    return await db.write(create)


@router.get("", response_model=WebhookList, dependencies=[ADMIN])
async def list_webhooks(db: DatabaseDep) -> WebhookList:
    """Every stored hook, oldest first, without secrets."""

    def read(session: Session) -> WebhookList:
        hooks = [to_public(hook) for hook in store.list_hooks(session)]
        return WebhookList(data=hooks, count=len(hooks))

    return await db.read(read)


@router.get("/{hook_id}", response_model=WebhookPublic, dependencies=[ADMIN])
async def read_webhook(hook_id: HookId, db: DatabaseDep) -> WebhookPublic:
    """One hook, without its secret."""
    return await db.read(lambda session: to_public(store.get_hook(session, hook_id)))


@router.patch("/{hook_id}", response_model=WebhookPublic, dependencies=[ADMIN])
async def update_webhook(hook_id: HookId, change: WebhookUpdate, db: WriterDep) -> WebhookPublic:
    """Change a hook (enable, disable, url, format, project, severity, events)."""

    def update(session: Session) -> WebhookPublic:
        hook = store.change_hook(session, hook_id, change)
        session.commit()
        return to_public(hook)

    return await db.write(update)


@router.delete("/{hook_id}", response_model=WebhookPublic, dependencies=[ADMIN])
async def delete_webhook(hook_id: HookId, db: WriterDep) -> WebhookPublic:
    """Delete a hook; its messages not yet delivered are dropped with it."""

    def delete(session: Session) -> WebhookPublic:
        public = to_public(store.delete_hook(session, hook_id))
        session.commit()
        return public

    return await db.write(delete)


@router.post("/{hook_id}/test", response_model=WebhookTestResult, dependencies=[ADMIN])
async def test_webhook(
    hook_id: HookId, db: DatabaseDep, settings: SettingsDep
) -> WebhookTestResult:
    """Send the hook a sample message now, signed and in its format; what the receiver said."""
    url, fmt, project, secret = await db.read(lambda session: _sending(session, hook_id))
    message = sample_message(project, settings.public_url).model_dump(mode="json")
    body = webhook_messages.render(message, fmt)
    answer = await run_in_threadpool(
        send, url, body, secret, settings.webhook_timeout_s, event="test", delivery="test"
    )
    return WebhookTestResult(
        delivered=answer.delivered,
        status_code=answer.status_code,
        response=answer.text,
        elapsed_ms=answer.elapsed_ms,
    )


def _sending(session: Session, hook_id: int) -> tuple[str, str, str | None, str]:
    """What a test needs of the hook: its url, format, project and secret."""
    hook = store.get_hook(session, hook_id)
    return hook.url, hook.format, hook.project, hook.secret


def sample_message(project: str | None, public_url: str) -> WebhookMessage:
    """The test message: an example alert of an example run (neither is stored)."""
    now = utcnow()
    alert = AlertPublic(
        id=0,
        run_id="rlguard-test",
        run_name="test message",
        project=project or "example",
        detector="entropy_collapse",
        key="",
        severity="warn",
        status="open",
        secondary=False,
        acknowledged=False,
        first_step=120,
        last_step=170,
        message="A test message from rlguard: this hook is reachable. No run is alerting.",
        evidence={},
        advice=["Nothing to do: this was sent from the webhooks settings."],
        created_at=now,
        updated_at=now,
    )
    run = WebhookRun(id="rlguard-test", project=project or "example", name="test message")
    return webhook_messages.alert_message(run, alert, "test", public_url, now)
