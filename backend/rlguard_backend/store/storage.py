"""The point store: what ingest, series reads, rewinds and backtests ask of point storage.

``STORE`` is the one implementation, the ``points`` module (chunked arrays and rollups in the
run database). A dedicated time-series engine (ClickHouse, say; docs/deployment.md says when
one would pay) takes over by implementing ``PointStore`` and replacing ``STORE``: ingest, the
series reads and the detectors reach points only through it. Runs, keys, alerts, samples and
detector state stay in the run database either way; a store gets that database's session so
it can keep its writes in the same transaction, or ignore it and write elsewhere.

One verb is SQL rather than values: the runs grid sorts and filters thousands of runs by their
last value of a signal in one query of the run database, so ``last_value_sql`` gives that value
as an expression of it (a store elsewhere would keep a last-value table there for it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from rlguard_backend.store import points
from rlguard_backend.store.points import KeyColumns, KeyTail, Row
from rlguard_backend.store.rollups import Summary


class PointStore(Protocol):
    """Points of metric keys (by key id), by step, with per-bucket summaries for downsampling."""

    def store_points(
        self, session: Session, points: KeyColumns, tails: Mapping[int, KeyTail]
    ) -> dict[int, KeyTail]:
        """Store each key's new columns; returns each key's tail after the write."""
        ...

    def update_rollups(
        self, session: Session, points: KeyColumns, previous_last_step: Mapping[int, int | None]
    ) -> None:
        """Bring the summaries of the buckets the new points fall in up to date."""
        ...

    def key_tail(self, session: Session, key_id: int) -> KeyTail:
        """A key's last stored step and tail, read from storage."""
        ...

    def read_points(self, session: Session, key_id: int, lo: int, hi: int) -> list[Row]:
        """Raw ``(step, value, wall_time)`` with ``lo <= step <= hi``, in step order."""
        ...

    def read_first(self, session: Session, key_id: int, lo: int, hi: int, limit: int) -> list[Row]:
        """The key's first ``limit`` points with ``lo <= step <= hi``, in step order."""
        ...

    def read_arrays(
        self, session: Session, key_id: int, lo: int, hi: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """``read_points`` as arrays: steps (int64) and values (float64, NaN kept)."""
        ...

    def read_times(self, session: Session, key_id: int, steps: Sequence[int]) -> list[float | None]:
        """Wall times of the given steps of one key, in the order given."""
        ...

    def cover(self, session: Session, key_id: int, lo: int, hi: int, level: int) -> list[Summary]:
        """Summaries exactly covering steps ``lo..hi`` at bucket ``level`` (finer at the edges)."""
        ...

    def last_value_sql(self, key_id: ColumnElement[int]) -> ColumnElement[float]:
        """The last stored value of the key ``key_id`` (a correlated SQL expression) as SQL."""
        ...

    def delete_after(self, session: Session, key_ids: Sequence[int], step: int) -> None:
        """Remove the keys' points after ``step`` (a rewind) and their summaries."""
        ...


STORE: PointStore = points  # mypy checks the module against the protocol
