"""How much one service process takes on at once, and the one way requests reach the database.

Why this design cannot deadlock: a request's unit of work (write lock, connection, session,
commit, release) runs from start to end inside one call on one worker thread, so nothing that
holds a lock or a pooled connection ever waits for a thread; the pool has a connection for every
thread that can ask for one, so no thread waits for a connection; and a write beyond the
in-flight limit is refused on the event loop before it takes a thread, a lock or a connection.

Reads and writes have thread pools of their own, so reads keep answering while ingest is
saturated (SQLite readers in WAL mode never take the write lock).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TypeVar

import anyio.to_thread
from anyio import CapacityLimiter
from sqlalchemy.orm import Session, sessionmaker

from rlguard_backend.core.db import write_session
from rlguard_backend.core.errors import Saturated
from rlguard_backend.core.stalls import WritesInFlight

T = TypeVar("T")


@dataclasses.dataclass
class WriteGate:
    """Counts the write requests in flight and refuses the one past ``limit`` at once.

    Used only from the event loop, so a plain counter needs no lock.

    >>> gate = WriteGate(limit=1, retry_after_s=2)
    >>> gate.enter()
    >>> gate.saturated
    True
    >>> gate.leave()
    """

    limit: int
    retry_after_s: int
    in_flight: int = 0
    admitted_total: int = 0
    refused_total: int = 0

    @property
    def saturated(self) -> bool:
        """True when the next write would be refused."""
        return self.in_flight >= self.limit

    def enter(self) -> None:
        """Admit one write, or raise ``Saturated`` (503 with ``Retry-After``) at once."""
        if self.saturated:
            self.refused_total += 1
            raise Saturated(
                f"{self.in_flight} writes in flight, the limit of this process "
                f"(max_inflight_writes={self.limit}); retry after {self.retry_after_s} s",
                self.retry_after_s,
            )
        self.in_flight += 1
        self.admitted_total += 1

    def leave(self) -> None:
        """Release the place of a write that finished."""
        self.in_flight -= 1


@dataclasses.dataclass
class BodyBudget:
    """The bytes of request bodies the process holds at once, summed over every request.

    A body is charged as it arrives (all of its Content-Length at once when it declares one)
    and released when its request is answered; a charge past ``limit`` is refused with
    ``Saturated`` (503 with ``Retry-After``). Used only from the event loop, like ``WriteGate``.

    >>> budget = BodyBudget(limit=10, retry_after_s=1)
    >>> budget.charge(8)
    >>> budget.fits(3)
    False
    >>> budget.release(8)
    """

    limit: int
    retry_after_s: int
    held: int = 0
    refused_total: int = 0

    def fits(self, size: int) -> bool:
        """True when ``size`` more bytes stay within the budget."""
        return self.held + size <= self.limit

    def charge(self, size: int) -> None:
        """Hold ``size`` more bytes, or raise ``Saturated`` when they do not fit."""
        if not self.fits(size):
            self.refused_total += 1
            raise Saturated(
                f"request bodies of {self.held} bytes are in flight in this process and "
                f"{size} more would pass its budget of {self.limit} bytes "
                f"(RLGUARD_MAX_INFLIGHT_BODY_BYTES); retry after {self.retry_after_s} s, "
                "or send smaller batches",
                self.retry_after_s,
            )
        self.held += size

    def release(self, size: int) -> None:
        """Give back bytes of a request that was answered."""
        self.held -= size


class Database:
    """Runs units of work on the read or the write thread pool, each in one thread call."""

    def __init__(
        self,
        factory: sessionmaker[Session],
        *,
        read_threads: int,
        write_threads: int,
        max_inflight_writes: int,
        retry_after_s: int,
        write_hold_warn_s: float = 30.0,
    ) -> None:
        self.factory = factory
        self.gate = WriteGate(max_inflight_writes, retry_after_s)
        self.writes = WritesInFlight(write_hold_warn_s)
        self._read_threads = CapacityLimiter(read_threads)
        self._write_threads = CapacityLimiter(write_threads)

    async def read(self, unit: Callable[[Session], T]) -> T:
        """``unit(session)`` on a read thread; the session is closed before the thread returns."""
        return await anyio.to_thread.run_sync(
            functools.partial(self._read_unit, unit), limiter=self._read_threads
        )

    async def write(self, unit: Callable[[Session], T]) -> T:
        """``unit(session)`` on a write thread, under SQLite's write lock; ``unit`` commits."""
        return await self.on_write_thread(functools.partial(self._write_unit, unit))

    async def on_write_thread(self, work: Callable[[], T]) -> T:
        """``work()`` on a write thread, for work that opens its own write sessions."""
        return await anyio.to_thread.run_sync(work, limiter=self._write_threads)

    def _read_unit(self, unit: Callable[[Session], T]) -> T:
        with self.factory() as session:
            return unit(session)

    def _write_unit(self, unit: Callable[[Session], T]) -> T:
        with write_session(self.factory) as session:
            return unit(session)
