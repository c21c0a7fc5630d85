"""Webhook delivery from the durable outbox: retries with capped backoff, one message per change.

Rows are claimed with a lease before posting, so several service processes never post the same
row at once; a delivered row is never posted again. A stored hook's row is sent to the hook's
url, in its format and signed with its secret as they are when it is sent; a disabled hook's
rows wait (and go out if it is enabled again); a deleted hook's rows are gone with it.
"""

from __future__ import annotations

import http.client
import logging
import random
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from rlguard_backend.core.config import Settings
from rlguard_backend.core.db import write_session
from rlguard_backend.detection import webhook_messages
from rlguard_backend.models import StoredWebhook, WebhookDelivery, utcnow

log = logging.getLogger("rlguard_backend.detection.webhooks")
CLAIM_BATCH = 20
ANSWER_CHARS = 300  # of a receiver's answer, kept with a failure or shown for a test


@dataclass(frozen=True)
class Outgoing:
    """One claimed outbox row, with where and how to send it now."""

    row_id: int
    url: str
    format: str
    secret: str | None
    message: dict[str, Any]


@dataclass(frozen=True)
class Answer:
    """What a receiver said: its status (None when it could not be reached) and text."""

    status_code: int | None
    text: str
    elapsed_ms: float

    @property
    def delivered(self) -> bool:
        """The receiver answered 2xx."""
        return self.status_code is not None and 200 <= self.status_code < 300

    @property
    def error(self) -> str | None:
        """None when delivered, else what went wrong."""
        if self.delivered:
            return None
        return self.text if self.status_code is None else f"HTTP {self.status_code}: {self.text}"


class WebhookWorker:
    """A thread posting due outbox rows every ``webhook_poll_interval_s``."""

    def __init__(self, factory: sessionmaker[Session], settings: Settings) -> None:
        self.factory = factory
        self.settings = settings
        self._secrets = {hook.url: hook.secret for hook in settings.webhooks}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rlguard-webhooks", daemon=True)

    def start(self) -> WebhookWorker:
        """Start delivering the outbox."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the delivery thread, waiting at most one request's timeout."""
        self._stop.set()
        self._thread.join(timeout=self.settings.webhook_timeout_s + 5)

    def _loop(self) -> None:
        while not self._stop.wait(self.settings.webhook_poll_interval_s):
            try:
                self.deliver_due()
            except Exception:  # the worker must outlive a database hiccup; it retries next tick
                log.exception("webhook delivery round failed")

    def deliver_due(self) -> int:
        """Post every due row once; returns how many were delivered."""
        delivered = 0
        for outgoing in self._claim():
            message = dict(outgoing.message)
            if "event" in message:  # the link as the service is configured now
                alert = message["alert"]
                message["run_url"] = webhook_messages.run_url(
                    self.settings.public_url,
                    message["run"]["id"],
                    alert["first_step"],
                    alert["last_step"],
                )
            body = webhook_messages.render(message, outgoing.format)
            answer = send(
                outgoing.url,
                body,
                outgoing.secret,
                self.settings.webhook_timeout_s,
                event=str(message.get("event", "")),
                delivery=str(outgoing.row_id),
            )
            self._record(outgoing, answer.error)
            delivered += answer.delivered
        return delivered

    def _due(self, now: Any) -> Any:
        return (
            select(WebhookDelivery, StoredWebhook)
            .outerjoin(StoredWebhook, WebhookDelivery.hook_id == StoredWebhook.id)
            .where(
                WebhookDelivery.delivered_at.is_(None),
                WebhookDelivery.attempts < self.settings.webhook_max_attempts,
                WebhookDelivery.next_attempt_at <= now,
                WebhookDelivery.hook_id.is_(None) | StoredWebhook.enabled.is_(True),
            )
            .order_by(WebhookDelivery.id)
            .limit(CLAIM_BATCH)
        )

    def _claim(self) -> list[Outgoing]:
        now = utcnow()
        with self.factory() as session:  # most rounds find nothing: no write lock for them
            if (
                session.execute(self._due(now).with_only_columns(WebhookDelivery.id)).first()
                is None
            ):
                return []
        lease = timedelta(seconds=self.settings.webhook_timeout_s * 2 + 5)
        with write_session(self.factory) as session:
            query = self._due(now)
            if session.get_bind().dialect.name != "sqlite":
                query = query.with_for_update(skip_locked=True, of=WebhookDelivery)
            claimed = []
            for row, hook in session.execute(query):
                row.next_attempt_at = now + lease
                claimed.append(self._outgoing(row, hook))
            session.commit()
        return claimed

    def _outgoing(self, row: WebhookDelivery, hook: StoredWebhook | None) -> Outgoing:
        if hook is None:  # a server-wide hook of the settings
            return Outgoing(
                row.id, row.target, row.format, self._secrets.get(row.target), row.payload
            )
        return Outgoing(row.id, hook.url, hook.format, hook.secret, row.payload)

    def _record(self, outgoing: Outgoing, error: str | None) -> None:
        with write_session(self.factory) as session:
            row = session.get(WebhookDelivery, outgoing.row_id)
            if row is None:  # its hook was deleted meanwhile
                return
            row.attempts += 1
            if error is None:
                row.delivered_at, row.last_error = utcnow(), None
            else:
                row.last_error = error[:2000]
                row.next_attempt_at = utcnow() + timedelta(seconds=self._backoff(row.attempts))
                log.warning(
                    "webhook %s attempt %d failed: %s",
                    webhook_messages.shown_url(outgoing.url),
                    row.attempts,
                    error,
                )
            session.commit()

    def _backoff(self, attempts: int) -> float:
        capped = min(
            self.settings.webhook_backoff_base_s * 2 ** (attempts - 1),
            self.settings.webhook_backoff_cap_s,
        )
        return capped * random.uniform(0.5, 1.0)


def send(
    url: str,
    body: dict[str, Any],
    secret: str | None,
    timeout_s: float,
    *,
    event: str,
    delivery: str,
) -> Answer:
    """POST ``body`` as JSON, signed with ``secret`` when there is one; the receiver's answer.

    ``event`` and ``delivery`` (the outbox row's id, the same on every retry) go in headers.
    """
    raw = webhook_messages.encode(body)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "rlguard-webhooks",
        "X-Rlguard-Delivery": delivery,
        "X-Rlguard-Event": event,
        **webhook_messages.signed_headers(secret, int(time.time()), raw),
    }
    started = time.perf_counter()
    try:  # a url urllib cannot read raises ValueError from Request itself
        request = urllib.request.Request(url, data=raw, headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            text = response.read(ANSWER_CHARS).decode("utf-8", "replace")
            status = response.status
    except urllib.error.HTTPError as exc:
        text, status = exc.read(ANSWER_CHARS).decode("utf-8", "replace"), exc.code
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
        text, status = f"{type(exc).__name__}: {exc}", None
    return Answer(status, text, round((time.perf_counter() - started) * 1000, 1))
