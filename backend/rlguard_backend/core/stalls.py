"""Writes in flight and how long each has held the write lock: a stall you can see.

The write gate admits a write (``api/deps.admit_write``) and registers it here with its route
and run; ``core/db.write_session`` marks when it took the write lock (SQLite: the process's
lock; PostgreSQL: when its transaction began) and when it let go. Three things read it:

- ``GET /api/v1/health`` and ``/metrics``: the age of the oldest write in flight per route, and
  the longest hold of the write lock right now;
- ``StallWatch``, a thread that logs a unit holding the lock past ``write_hold_warn_s`` once,
  while it still holds it (a unit that never ends is seen, not only one that ends late);
- the unit itself, which logs how long it held the lock when it lets go past that limit.

>>> writes = WritesInFlight(hold_warn_s=30)
>>> unit = writes.admit("POST /api/v1/runs", None)
>>> list(writes.oldest_by_route())
['POST /api/v1/runs']
>>> writes.leave(unit)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

log = logging.getLogger("rlguard_backend.core.stalls")
# The write the current request was admitted as; worker threads see it (anyio copies the
# context into them), so write_session finds it without every caller passing it along.
CURRENT_WRITE: ContextVar[WriteUnit | None] = ContextVar("rlguard_write_unit", default=None)


@dataclass(eq=False)
class WriteUnit:
    """One admitted write: its route, its run, and since when it holds the write lock."""

    route: str
    run_id: str | None
    owner: WritesInFlight
    admitted_at: float = field(default_factory=time.monotonic)
    holding_since: float | None = None
    reported: bool = False

    def where(self) -> str:
        """The route and run, as a log line names them."""
        return f"{self.route} (run {self.run_id or '-'})"


@dataclass(frozen=True)
class Hold:
    """The longest hold of the write lock at one moment."""

    route: str
    run_id: str | None
    held_s: float


class WritesInFlight:
    """The writes admitted and not yet answered, with their holds of the write lock."""

    def __init__(self, hold_warn_s: float) -> None:
        self.hold_warn_s = hold_warn_s
        self.holds_over_limit_total = 0
        self._units: set[WriteUnit] = set()
        self._lock = threading.Lock()  # admitted on the event loop, read by the watch thread

    def admit(self, route: str, run_id: str | None) -> WriteUnit:
        """Register a write that was just admitted."""
        unit = WriteUnit(route, run_id, self)
        with self._lock:
            self._units.add(unit)
        return unit

    def leave(self, unit: WriteUnit) -> None:
        """Forget a write that was answered."""
        with self._lock:
            self._units.discard(unit)

    def oldest_by_route(self) -> dict[str, float]:
        """Per route, the age in seconds of its oldest write in flight."""
        now = time.monotonic()
        oldest: dict[str, float] = {}
        for unit in self._snapshot():
            oldest[unit.route] = max(oldest.get(unit.route, 0.0), now - unit.admitted_at)
        return {route: round(age, 3) for route, age in sorted(oldest.items())}

    def longest_hold(self) -> Hold | None:
        """The unit holding the write lock longest right now, None when none holds it."""
        now = time.monotonic()
        holding = [u for u in self._snapshot() if u.holding_since is not None]
        if not holding:
            return None
        unit = min(holding, key=lambda u: u.holding_since or now)
        return Hold(unit.route, unit.run_id, round(now - (unit.holding_since or now), 3))

    def report_overdue(self) -> int:
        """Log each unit holding the lock past the limit, once; returns how many were new."""
        now = time.monotonic()
        overdue = [
            unit
            for unit in self._snapshot()
            if not unit.reported
            and unit.holding_since is not None
            and now - unit.holding_since > self.hold_warn_s
        ]
        for unit in overdue:
            unit.reported = True
            self.holds_over_limit_total += 1
            log.warning(
                "%s has held the write lock for %.1f s, past RLGUARD_WRITE_HOLD_WARN_S=%g; "
                "every other write of this process waits for it",
                unit.where(),
                now - (unit.holding_since or now),
                self.hold_warn_s,
            )
        return len(overdue)

    def released(self, unit: WriteUnit, held_s: float) -> None:
        """Log a hold past the limit when it ends too, with its full length."""
        if unit.reported:
            log.warning("%s let go of the write lock after %.1f s", unit.where(), held_s)
        elif held_s > self.hold_warn_s:  # ended before the watch looked
            self.holds_over_limit_total += 1
            log.warning(
                "%s held the write lock for %.1f s, past RLGUARD_WRITE_HOLD_WARN_S=%g",
                unit.where(),
                held_s,
                self.hold_warn_s,
            )
        unit.reported = False

    def _snapshot(self) -> list[WriteUnit]:
        with self._lock:
            return list(self._units)


@contextmanager
def holding_write_lock() -> Iterator[None]:
    """Mark the current write as holding the write lock while the block runs."""
    unit = CURRENT_WRITE.get()
    if unit is None:  # a background worker's write: not a request, nothing to show
        yield
        return
    unit.holding_since = time.monotonic()
    try:
        yield
    finally:
        held_s = time.monotonic() - unit.holding_since
        unit.holding_since = None
        unit.owner.released(unit, held_s)


class StallWatch(threading.Thread):
    """A thread that logs writes holding the lock past their limit, while they hold it."""

    def __init__(self, writes: WritesInFlight) -> None:
        super().__init__(name="rlguard-stalls", daemon=True)
        self.writes = writes
        self.interval_s = min(1.0, writes.hold_warn_s / 4)
        self._stopped = threading.Event()

    def run(self) -> None:
        """Look every ``interval_s`` until stopped."""
        while not self._stopped.wait(self.interval_s):
            self.writes.report_overdue()

    def stop(self) -> None:
        """Stop looking (bounded wait)."""
        self._stopped.set()
        if self.is_alive():
            self.join(timeout=10)
