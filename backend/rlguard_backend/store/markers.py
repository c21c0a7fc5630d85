"""Moments worth a vertical line on every chart of a run: restarts, rewinds, LR changes,
stop and checkpoint commands.

Alerts are markers too; the dashboard draws them from the run's alerts.

>>> lr_changes([(0, 3e-4), (1, 3e-4), (2, 3e-4), (3, 1e-4), (4, 1e-4)])
[(3, 0.0003, 0.0001)]
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from rlguard_backend.models import MetricKey, RunEvent
from rlguard_backend.schemas import Marker
from rlguard_backend.store import commands, storage

LR_JUMP = 0.05  # a change of 5 % or more between two logged steps …
LR_STEADY = 0.01  # … after a step that changed it by less than 1 %: a schedule's onset, once


def lr_changes(rows: Sequence[tuple[int, float | None]]) -> list[tuple[int, float, float]]:
    """``(step, before, after)`` where the learning rate jumps after holding steady.

    A warm-up or a decay that moves it every step is marked once, where it starts; a smooth
    schedule (cosine, 1 % a step at most) is not marked at all.
    """
    found: list[tuple[int, float, float]] = []
    previous: tuple[int, float] | None = None
    steady = True
    for step, value in rows:
        if value is None:
            continue
        if previous is not None:
            change = _relative(previous[1], value)
            if change >= LR_JUMP and steady:
                found.append((step, previous[1], value))
            steady = change < LR_STEADY
        previous = (step, value)
    return found


def _relative(a: float, b: float) -> float:
    scale = max(abs(a), abs(b))
    return 0.0 if scale == 0 else abs(b - a) / scale


def run_markers(session: Session, run_id: str) -> list[Marker]:
    """The run's restarts, rewinds, learning-rate changes and commands, in step order."""
    events = session.scalars(
        select(RunEvent).where(RunEvent.run_id == run_id, RunEvent.step.is_not(None))
    )
    found = [Marker(step=e.step or 0, kind=e.kind, label=e.kind) for e in events]  # type: ignore[arg-type]
    key = session.scalar(
        select(MetricKey)
        .where(MetricKey.run_id == run_id, MetricKey.signal == "lr")
        .order_by(MetricKey.name)
        .limit(1)
    )
    if key is not None and key.last_step is not None:
        points = storage.STORE.read_points(session, key.id, 0, key.last_step)
        rows = [(s, v) for s, v, _ in points]
        found += [
            Marker(step=step, kind="lr_change", label=f"lr {before:.3g} → {after:.3g}")
            for step, before, after in lr_changes(rows)
        ]
    found += commands.markers(session, run_id)
    return sorted(found, key=lambda m: (m.step, m.kind))
