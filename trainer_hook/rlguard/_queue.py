"""The log queue: what the training thread hands to the sender, bounded in bytes.

Metrics and samples share one byte budget. When it is spent, queued samples go first (oldest
first) so that a flood of samples never costs a metric point; only when no sample is left is a
new ``log()`` entry refused. Flush markers and the stop sentinel always get in. Every drop is
counted; the sender warns about them, so the training thread never writes a log line.
"""

from __future__ import annotations

import collections
import threading
from sys import getsizeof
from typing import Any

METRIC_VALUE_BYTES = 64  # a float object and its slot in the logged dict, roughly
ENTRY_BYTES = 120  # the entry tuple, its step and time
STOP = object()  # the stop sentinel: the sender finishes what was queued before it


class FlushMarker:
    """Queued by ``flush()``; set once everything queued before it is sent or spooled."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()


class LogQueue:
    """Two deques (metrics with markers, samples) under one byte budget and one short lock."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.dropped_steps = 0  # log() entries refused while the budget was spent
        self.dropped_samples = 0  # samples evicted or refused to make room
        self._metrics: collections.deque[Any] = collections.deque()
        self._samples: collections.deque[tuple[Any, int, int]] = collections.deque()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LogQueue(bytes={self.bytes}, max_bytes={self.max_bytes})"

    def __len__(self) -> int:
        return len(self._metrics)

    def append(self, item: Any) -> None:
        """Queue a ``log()`` entry ``(step, time, metrics)``, a flush marker or the stop."""
        if type(item) is tuple:
            metrics = item[2]
            size = getsizeof(metrics) + METRIC_VALUE_BYTES * len(metrics) + ENTRY_BYTES
        else:
            size = 0
        with self._lock:
            if self.bytes + size > self.max_bytes and not self._make_room(size):
                self.dropped_steps += 1
                return
            self._metrics.append(item)
            self.bytes += size

    def append_samples(self, item: Any, count: int, size: int) -> None:
        """Queue one ``log_samples()`` call of ``count`` records holding about ``size`` bytes."""
        with self._lock:
            if self.bytes + size > self.max_bytes:
                self.dropped_samples += count
                return
            self._samples.append((item, count, size))
            self.bytes += size

    def take(self) -> tuple[list[Any], list[Any]]:
        """Everything queued so far: (metric entries and markers, sample entries), oldest first."""
        with self._lock:
            metrics, self._metrics = self._metrics, collections.deque()
            samples, self._samples = self._samples, collections.deque()
            self.bytes = 0
        return list(metrics), [item for item, _, _ in samples]

    def _make_room(self, size: int) -> bool:
        """Evict the oldest sample entries until ``size`` more bytes fit; False if they cannot."""
        while self.bytes + size > self.max_bytes and self._samples:
            _, count, freed = self._samples.popleft()
            self.dropped_samples += count
            self.bytes -= freed
        return self.bytes + size <= self.max_bytes
