"""Live detector suites of recently fed runs, kept per process and handed over on commit."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from weakref import WeakSet

from sqlalchemy import event
from sqlalchemy.orm import Session

from rlguard_backend.stability import DetectorSuite

CACHED_SUITES = 256
Values = dict[str, float]
Pending = tuple[int, Values] | None  # the newest step, fed once a later one arrives
_KEEP = "rlguard.live_suites"  # Session.info: the live suites to cache once it commits


@dataclass(eq=False)
class Live:
    """A run's suite as fed so far, its pending step, and how far it is ahead of the stored
    checkpoint (the steps fed since, whose points the database holds)."""

    run_id: str
    suite: DetectorSuite
    pending: Pending
    generation: str | None  # the stored checkpoint's, which this suite continues
    cache: SuiteCache
    steps_ahead: int = 0
    batches_ahead: int = 0
    restored: bool = True  # built from the database in this unit of work: checkpoint it


class SuiteCache:
    """Live suites of recently fed runs, so a process skips rebuilding one from JSON per batch.

    A unit of work takes a run's entry out (take) and puts it back once it commits
    (keep_on_commit): a rollback leaves no suite ahead of the database. An entry is used only
    when the stored checkpoint's ``generation`` is the one it continues: another process
    feeding the run, a backtest or a rewind write a new one.
    """

    def __init__(self, size: int = CACHED_SUITES) -> None:
        self._size = size
        self._entries: OrderedDict[str, Live] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, run_id: str, generation: str | None) -> Live | None:
        """Take out the run's suite if it continues ``generation``, else None (it is dropped)."""
        with self._lock:
            live = self._entries.pop(run_id, None)
        if live is None or generation is None or live.generation != generation:
            return None
        return live

    def peek(self, run_id: str) -> Live | None:
        """The run's cached suite without taking it out."""
        with self._lock:
            return self._entries.get(run_id)

    def put(self, live: Live) -> None:
        """Put a suite back (after its unit of work committed), evicting the least recent."""
        with self._lock:
            self._entries[live.run_id] = live
            self._entries.move_to_end(live.run_id)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)


SUITES = SuiteCache()  # this process's


def keep_on_commit(session: Session, live: Live) -> None:
    """Cache `live` once the session commits (dropped if it rolls back)."""
    _listen(session)
    session.info.setdefault(_KEEP, []).append(live)


# The session factories (each sessionmaker's own Session subclass) already listened to.
_FACTORIES: WeakSet[type[Session]] = WeakSet()


def _listen(session: Session) -> None:
    """Listen to commits of the session's factory: a sessionmaker makes its sessions of a
    Session subclass of its own, which is what ``event.listen(factory, ...)`` listens to. A
    session made without a factory is listened to alone."""
    factory = type(session)
    if factory in _FACTORIES:
        return
    target: Session | type[Session] = session if factory is Session else factory
    event.listen(target, "after_commit", _after_commit)
    event.listen(target, "after_rollback", _after_rollback)
    if factory is not Session:
        _FACTORIES.add(factory)


def _after_commit(session: Session) -> None:
    for live in session.info.pop(_KEEP, ()):
        live.cache.put(live)


def _after_rollback(session: Session) -> None:
    session.info.pop(_KEEP, None)
