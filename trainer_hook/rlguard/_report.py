"""What the sender tells about a run's points and samples: counters, warnings shown once, and
the drops it reports to the service."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from typing import Any

from rlguard._queue import LogQueue
from rlguard._spool import POINTS, SAMPLES
from rlguard.errors import RejectedError

logger = logging.getLogger("rlguard")


@dataclasses.dataclass
class Counters:
    """What happened to the logged points: the numbers behind ``run.status()``."""

    logged: int = 0
    skipped: int = 0
    sent: int = 0
    spooled: int = 0
    replayed: int = 0
    dropped: int = 0
    dropped_steps: int = 0
    dead_lettered: int = 0
    last_error: str | None = None
    samples_logged: int = 0  # kept by the per-step budget and put in batches
    samples_filtered: int = 0  # over the per-step budget, left out by the sampling policy
    samples_sent: int = 0
    samples_spooled: int = 0
    samples_replayed: int = 0
    samples_dropped: int = 0
    samples_dead_lettered: int = 0
    sample_signal_points: int = 0  # of logged: read from the samples (samples/... keys)

    def add(self, kind: str, name: str, n: int) -> None:
        """Count ``n`` points (kind ``"p"``) or samples (``"s"``) as ``name``."""
        field = name if kind == POINTS else f"samples_{name}"
        setattr(self, field, getattr(self, field) + n)


class Warnings:
    """Logs one warning per cause, so that a problem repeated every step is told once."""

    def __init__(self) -> None:
        self._causes: set[str] = set()

    def __repr__(self) -> str:
        return f"Warnings(causes={sorted(self._causes)})"

    def warn_once(self, cause: str, message: str) -> None:
        """Log ``message`` unless a warning of ``cause`` was logged before."""
        if cause not in self._causes:
            self._causes.add(cause)
            logger.warning(message)


NOUNS = {POINTS: "point(s)", SAMPLES: "sample(s)"}


class DropReport:
    """What this process dropped undelivered (points, steps, samples): counted, warned about
    once per cause, and what the service was last told of it in a heartbeat (named by a
    process id, so a report sent twice counts once)."""

    def __init__(self, counters: Counters, queue: LogQueue, warnings: Warnings) -> None:
        self._counters = counters
        self._queue = queue
        self._warnings = warnings
        self.process = uuid.uuid4().hex
        self.reported = (0, 0, 0)

    def __repr__(self) -> str:
        return f"DropReport(reported={self.reported})"

    def drop(self, kind: str, count: int, cause: str, message: str) -> None:
        """Count ``count`` points (kind ``"p"``) or samples (``"s"``) dropped for ``cause``."""
        self._counters.add(kind, "dropped", count)
        self._counters.last_error = message
        self._warnings.warn_once(cause, message)

    def spool_failed(self, kind: str, count: int, exc: BaseException, disk_full: bool) -> None:
        """A batch the spool could not write (``exc``) is dropped."""
        self.drop(
            kind,
            count,
            "spool-disk-full" if disk_full else "spool-error",
            f"rlguard: cannot write the spool ({exc}); {count} {NOUNS[kind]} dropped "
            "(shown once; run.status() counts them and the service is told)",
        )

    def dead_lettered(
        self, kind: str, count: int, exc: RejectedError, kept_in: object, write_error: object = None
    ) -> None:
        """A batch the service rejected (``exc``) is kept in the dead letters ``kept_in``, or
        lost when writing them failed (``write_error``)."""
        self._counters.add(kind, "dead_lettered", count)
        self._counters.last_error = str(exc)
        if write_error is not None:
            self._warnings.warn_once(
                "dead-letter-failed",
                f"rlguard: the service rejected a batch ({exc}) "
                f"and the dead-letter file cannot be written ({write_error})",
            )
            return
        self._warnings.warn_once(
            f"rejected:{exc.status}",
            f"rlguard: the service rejected a batch of "
            f"{count} {NOUNS[kind]} ({exc}); kept in {kept_in} (shown once per status)",
        )

    def current(self) -> tuple[int, int, int]:
        """Points, steps and samples dropped so far, in the sender and in the queue."""
        counters, queue = self._counters, self._queue
        return (
            counters.dropped,
            counters.dropped_steps + queue.dropped_steps,
            counters.samples_dropped + queue.dropped_samples,
        )

    def untold(self) -> bool:
        """True when drops happened since the last report the service took."""
        return self.current() != self.reported

    def body(self, drops: tuple[int, int, int]) -> dict[str, Any] | None:
        """The heartbeat's ``drops`` field for ``drops`` (None when nothing was dropped)."""
        if not any(drops):
            return None
        points, steps, samples = drops
        return {"process": self.process, "points": points, "steps": steps, "samples": samples}

    def warn_queue_full(self, max_queue_mb: float) -> None:
        """Warn once when the log queue has refused or evicted anything."""
        steps, samples = self._queue.dropped_steps, self._queue.dropped_samples
        if steps or samples:
            self._warnings.warn_once(
                "queue-full",
                f"rlguard: the log queue reached its budget (max_queue_mb={max_queue_mb}); "
                f"samples are dropped first, then new steps; {steps} step(s) and {samples} "
                "sample(s) dropped so far (shown once; run.status() keeps counting)",
            )


def spool_room_message(spool_dir: object, problem: str, budget_mb: float) -> str:
    """The warning for a spool that must drop its oldest batches to take new ones."""
    return (
        f"rlguard: the spool {spool_dir} {problem} (spool_budget_mb={budget_mb}); its oldest "
        "samples, then its oldest points, are dropped to make room for new batches (shown "
        "once; run.status() counts them and the service is told)"
    )
