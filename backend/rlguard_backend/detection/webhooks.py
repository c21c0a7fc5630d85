"""Webhook delivery from the durable outbox: retries with capped backoff, one message per change.

Rows are claimed with a lease before posting, so several service processes never post the same
row at once; a delivered row is never posted again.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import urllib.error
import urllib.request
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from rlguard_backend.core.config import Settings
from rlguard_backend.core.db import write_session
from rlguard_backend.models import WebhookDelivery, utcnow

log = logging.getLogger("rlguard_backend.detection.webhooks")
CLAIM_BATCH = 20


class WebhookWorker:
    """A thread posting due outbox rows every ``webhook_poll_interval_s``."""

    def __init__(self, factory: sessionmaker[Session], settings: Settings) -> None:
        self.factory = factory
        self.settings = settings
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
        for row_id, target, payload in self._claim():
            error = _post(target, payload, self.settings.webhook_timeout_s)
            self._record(row_id, error)
            delivered += error is None
        return delivered

    def _claim(self) -> list[tuple[int, str, dict]]:
        now = utcnow()
        lease = timedelta(seconds=self.settings.webhook_timeout_s * 2 + 5)
        with write_session(self.factory) as session:
            query = (
                select(WebhookDelivery)
                .where(
                    WebhookDelivery.delivered_at.is_(None),
                    WebhookDelivery.attempts < self.settings.webhook_max_attempts,
                    WebhookDelivery.next_attempt_at <= now,
                )
                .order_by(WebhookDelivery.id)
                .limit(CLAIM_BATCH)
            )
            if session.get_bind().dialect.name != "sqlite":
                query = query.with_for_update(skip_locked=True)
            rows = list(session.scalars(query))
            for row in rows:
                row.next_attempt_at = now + lease
            claimed = [(row.id, row.target, dict(row.payload)) for row in rows]
            session.commit()
        return claimed

    def _record(self, row_id: int, error: str | None) -> None:
        with write_session(self.factory) as session:
            row = session.get(WebhookDelivery, row_id)
            if row is None:
                return
            row.attempts += 1
            if error is None:
                row.delivered_at, row.last_error = utcnow(), None
            else:
                row.last_error = error[:2000]
                row.next_attempt_at = utcnow() + timedelta(seconds=self._backoff(row.attempts))
                log.warning("webhook %s attempt %d failed: %s", row.target, row.attempts, error)
            session.commit()

    def _backoff(self, attempts: int) -> float:
        capped = min(
            self.settings.webhook_backoff_base_s * 2 ** (attempts - 1),
            self.settings.webhook_backoff_cap_s,
        )
        return capped * random.uniform(0.5, 1.0)


def _post(url: str, payload: dict, timeout_s: float) -> str | None:
    """POST JSON; None on a 2xx answer, else what went wrong."""
    request = urllib.request.Request(
        url,
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json", "User-Agent": "rlguard-webhooks"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            response.read()
            return None
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}: {exc.read()[:200]!r}"
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        return f"{type(exc).__name__}: {exc}"
