"""Runs whose trainer went silent: marked crashed once heartbeats and batches stop."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from rlguard_backend.core.config import Settings
from rlguard_backend.core.db import write_session
from rlguard_backend.models import Run, utcnow

log = logging.getLogger("rlguard_backend.detection.liveness")


def mark_silent_runs_crashed(session: Session, timeout_s: float) -> int:
    """Set ``crashed`` on running runs not heard from (heartbeat or batch) for ``timeout_s``."""
    cutoff = utcnow() - timedelta(seconds=timeout_s)
    result = session.execute(
        update(Run)
        .where(Run.status == "running", Run.last_heartbeat_at < cutoff)
        .values(status="crashed", updated_at=utcnow())
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


class LivenessWatch:
    """A thread that checks for silent runs a few times per heartbeat timeout."""

    def __init__(self, factory: sessionmaker[Session], settings: Settings) -> None:
        self.factory = factory
        self.interval_s = min(30.0, settings.heartbeat_timeout_s / 4)
        self.timeout_s = settings.heartbeat_timeout_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rlguard-liveness", daemon=True)

    def start(self) -> LivenessWatch:
        """Start watching for runs whose trainer went silent."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the watch thread (bounded wait)."""
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                with write_session(self.factory) as session:
                    crashed = mark_silent_runs_crashed(session, self.timeout_s)
                    session.commit()
            except Exception:  # keep watching through a database hiccup
                log.exception("liveness check failed")
                continue
            if crashed:
                log.info("marked %d silent run(s) crashed", crashed)
