"""Storage verbs of the stored webhooks: add, read, list, change, delete (no commits)."""

from __future__ import annotations

import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from rlguard_backend.core.errors import NotFound
from rlguard_backend.models import StoredWebhook, utcnow
from rlguard_backend.schemas.webhooks import WebhookCreate, WebhookUpdate

SECRET_BYTES = 32


def add_hook(session: Session, data: WebhookCreate, created_by: str) -> StoredWebhook:
    """A new hook with a new random signing secret."""
    now = utcnow()
    hook = StoredWebhook(
        **data.model_dump(),
        secret=secrets.token_hex(SECRET_BYTES),
        created_at=now,
        created_by=created_by,
        updated_at=now,
    )
    session.add(hook)
    session.flush()
    return hook


def get_hook(session: Session, hook_id: int) -> StoredWebhook:
    """The hook, or 404 naming where hooks are listed."""
    hook = session.get(StoredWebhook, hook_id)
    if hook is None:
        raise NotFound(f"no webhook {hook_id}; GET /api/v1/webhooks lists them")
    return hook


def list_hooks(session: Session) -> list[StoredWebhook]:
    """Every stored hook, oldest first."""
    return list(session.scalars(select(StoredWebhook).order_by(StoredWebhook.id)))


def change_hook(session: Session, hook_id: int, change: WebhookUpdate) -> StoredWebhook:
    """The hook with the fields ``change`` names set (``project: null`` included)."""
    hook = get_hook(session, hook_id)
    for field, value in change.model_dump(exclude_unset=True).items():
        setattr(hook, field, value)
    hook.updated_at = utcnow()
    return hook


def delete_hook(session: Session, hook_id: int) -> StoredWebhook:
    """Delete the hook; its undelivered messages go with it (the outbox's foreign key)."""
    hook = get_hook(session, hook_id)
    session.delete(hook)
    return hook
