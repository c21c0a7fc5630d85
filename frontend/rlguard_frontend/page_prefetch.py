"""Pages built while the browser starts the dashboard, for the layout request that follows.

A run page costs the server a few hundred ms of API reads, and the browser spends about a
second loading and starting Dash before it asks for the layout. The page's HTML request starts
the build; the layout request takes its result instead of starting from nothing.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

PREFETCH_TTL_S = 10.0  # older builds are dropped: the browser that wanted them is gone
WORKERS = 2  # builds at once; none waits in a queue, so a layout never waits behind others
MAX_PENDING = 8  # builds running or awaiting their layout request; beyond, layouts build

Key = tuple[str, str]  # (location, theme)


class PagePrefetch:
    """Builds started by ``start(key)``, each handed out once by ``take(key)``.

    >>> prefetch = PagePrefetch(lambda key: f"page for {key[0]}")
    >>> prefetch.start(("/runs/abc", "light"))
    >>> prefetch.take(("/runs/abc", "light"))
    'page for /runs/abc'
    >>> prefetch.take(("/runs/abc", "light")) is None
    True
    """

    def __init__(
        self,
        build: Callable[[Key], Any],
        *,
        ttl_s: float = PREFETCH_TTL_S,
        workers: int = WORKERS,
        max_pending: int = MAX_PENDING,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._build = build
        self._ttl_s = ttl_s
        self._workers = workers
        self._max_pending = max_pending
        self._clock = clock
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rlguard-prefetch")
        self._pending: list[tuple[float, Key, Future[Any]]] = []
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"PagePrefetch(pending={len(self._pending)}, ttl_s={self._ttl_s})"

    def start(self, key: Key) -> None:
        """Start building the page for ``key`` when a worker is free and few builds wait."""
        with self._lock:
            self._drop_expired()
            running = sum(1 for _, _, future in self._pending if not future.done())
            if running < self._workers and len(self._pending) < self._max_pending:
                # the build runs in the requester's context (its API token among others)
                future = self._pool.submit(contextvars.copy_context().run, self._build, key)
                self._pending.append((self._clock(), key, future))

    def take(self, key: Key) -> Any | None:
        """The oldest build started for ``key`` (waiting for it), or ``None`` if there is none.

        A build that failed raises its error here, as building on the spot would.
        """
        with self._lock:
            self._drop_expired()
            index = next((i for i, (_, k, _) in enumerate(self._pending) if k == key), None)
            if index is None:
                return None
            _, _, future = self._pending.pop(index)
        return future.result()

    def _drop_expired(self) -> None:
        oldest = self._clock() - self._ttl_s
        self._pending = [entry for entry in self._pending if entry[0] >= oldest]
