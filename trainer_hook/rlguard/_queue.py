"""The log queue: what the training thread hands to the sender, bounded in bytes.

Metrics and samples share one byte budget. When it is spent, queued samples go first (oldest
first) so that a flood of samples never costs a metric point; only when no sample is left is a
new ``log()`` entry refused. Flush markers and the stop sentinel always get in. Every drop is
counted; the sender warns about them, so the training thread never writes a log line.

What the sender took stays charged until it calls ``release()``, having shipped or spooled it:
entries the sender still holds are memory too, and a service that is down makes each drain
slow (every batch written to the spool), long enough for the training loop to fill the budget
again beside them.

A ``log()`` entry takes no lock while the budget has room: it is sized from its key count and
counted in ``added`` (written by ``log()`` only), the sender counts what it takes in ``taken``
(written by the sender only), and the deque's own ``append`` and ``popleft`` are atomic.
On a training step that sleeps or waits on the GPU, the lock's acquire and release, run with
cold caches, cost more than the rest of ``log()``. Samples, and a metric entry that finds the
budget spent, go through the lock. Two threads calling ``log()`` at the same instant may count
one entry's bytes once (the budget stays a bound, off by that entry); a trainer logs from one
thread, and the system sampler's entries take the lock and a counter of their own.
"""

from __future__ import annotations

import collections
import itertools
import operator
import threading
from typing import Any

KEY_BYTES = 96  # a metric's slot in the logged dict, and its float object, roughly
ENTRY_BYTES = 320  # the entry tuple, its step and time, and the dict's own header
STOP = object()  # the stop sentinel: the sender finishes what was queued before it
_METRICS = operator.itemgetter(2)  # of a log() entry
_ENTRY_TYPES = frozenset({tuple})  # a log() entry is a tuple; markers and the stop are not


class FlushMarker:
    """Queued by ``flush()``; set once everything queued before it is sent or spooled."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()


def entry_bytes(metrics: dict[Any, Any]) -> int:
    """What a ``log()`` entry of ``metrics`` is charged against the budget."""
    return ENTRY_BYTES + KEY_BYTES * len(metrics)


def has_markers(entries: list[Any]) -> bool:
    """True when ``entries`` hold a flush marker or the stop, not only ``log()`` entries."""
    return not _ENTRY_TYPES.issuperset(map(type, entries))


class LogQueue:
    """Two deques (metrics with markers, samples) under one byte budget."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.added = 0  # bytes of the metric entries log() queued without the lock
        self.added_locked = 0  # bytes of the metric entries queued under the lock
        self.taken = 0  # bytes of the metric entries the sender released (the sender's)
        self.sample_bytes = 0  # bytes of the sample entries queued now (under the lock)
        self.held = 0  # bytes of the sample entries the sender took and has not released
        self._taking = 0  # bytes of the metric entries the sender took and has not released
        self.dropped_steps = 0  # log() entries refused while the budget was spent
        self.dropped_samples = 0  # samples evicted or refused to make room
        self._metrics: collections.deque[Any] = collections.deque()
        self._samples: collections.deque[tuple[Any, int, int]] = collections.deque()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LogQueue(bytes={self.bytes}, max_bytes={self.max_bytes})"

    def __len__(self) -> int:
        return len(self._metrics)

    @property
    def bytes(self) -> int:
        """Bytes queued or held by the sender now, metrics and samples together."""
        return self.added + self.added_locked - self.taken + self.sample_bytes + self.held

    def append(self, item: Any) -> None:
        """Queue a ``log()`` entry ``(step, time, metrics)``, a flush marker or the stop."""
        if type(item) is tuple:
            size = ENTRY_BYTES + KEY_BYTES * len(item[2])
            queued = self.added + self.added_locked - self.taken + self.sample_bytes + self.held
            if queued + size > self.max_bytes:
                self.append_locked(item)
                return
            self.added += size
        self._metrics.append(item)

    def append_locked(self, item: Any) -> None:
        """Queue a ``log()`` entry under the lock, making room by evicting samples; a thread
        other than the training loop's (the system sampler) queues its entries here."""
        size = entry_bytes(item[2])
        with self._lock:
            if self.bytes + size > self.max_bytes and not self._make_room(size):
                self.dropped_steps += 1
                return
            self.added_locked += size
            self._metrics.append(item)

    def append_samples(self, item: Any, count: int, size: int) -> None:
        """Queue one ``log_samples()`` call of ``count`` records holding about ``size`` bytes."""
        with self._lock:
            if self.bytes + size > self.max_bytes:
                self.dropped_samples += count
                return
            self._samples.append((item, count, size))
            self.sample_bytes += size

    def take(self) -> tuple[list[Any], list[Any]]:
        """Everything queued so far: (metric entries and markers, sample entries), oldest first;
        they stay charged until ``release()``."""
        metrics = self._metrics
        # each popleft is atomic: what log() appends meanwhile waits for the next take
        entries = list(map(collections.deque.popleft, itertools.repeat(metrics, len(metrics))))
        logged = entries if not has_markers(entries) else [e for e in entries if type(e) is tuple]
        # what log() charged them, summed in C: a call per entry cost ~0.3 µs a step
        self._taking += ENTRY_BYTES * len(logged) + KEY_BYTES * sum(map(len, map(_METRICS, logged)))
        with self._lock:
            samples, self._samples = self._samples, collections.deque()
            self.held += self.sample_bytes
            self.sample_bytes = 0
        return entries, [item for item, _, _ in samples]

    def release(self) -> None:
        """The sender is done with what it took (shipped or spooled): its bytes leave the budget."""
        self.taken += self._taking
        self._taking = 0
        with self._lock:
            self.held = 0

    def _make_room(self, size: int) -> bool:
        """Evict the oldest sample entries until ``size`` more bytes fit; False if they cannot."""
        while self.bytes + size > self.max_bytes and self._samples:
            _, count, freed = self._samples.popleft()
            self.dropped_samples += count
            self.sample_bytes -= freed
        return self.bytes + size <= self.max_bytes
