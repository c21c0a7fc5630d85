"""Backtests: the detectors re-run over a run's stored points, optionally replacing its alerts."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from sqlalchemy import delete
from sqlalchemy.orm import Session

from rlguard_backend.core.config import Settings
from rlguard_backend.detection import alerts
from rlguard_backend.detection.checkpoints import make_suite, write_checkpoint
from rlguard_backend.detection.suite_cache import Values
from rlguard_backend.models import Alert, Run
from rlguard_backend.schemas import BacktestAlert, DetectResult
from rlguard_backend.stability import AlertEvent, DetectorSuite
from rlguard_backend.store import repository, storage

BACKTEST_CHUNK_STEPS = 5000


def backtest(
    session: Session, run: Run, settings: Settings, thresholds: Mapping[str, Any], apply: bool
) -> DetectResult:
    """Re-run the detectors over the stored run; with ``apply`` replace live alerts and state.

    An applied state is a checkpoint, fed every stored step (none pending): the run's next
    batch continues from it with the server's thresholds, in any process.
    """
    suite, events, count = replay_run(session, run, settings, thresholds)
    if apply:
        replace_live(session, run.id, suite, events, uuid.uuid4().hex)
    return DetectResult(
        run_id=run.id,
        steps=count,
        applied=apply,
        alerts=fold_events(events),
        missing=suite.missing(),
    )


def stored_chunks(
    session: Session,
    run_id: str,
    first: int = 0,
    last: int | None = None,
    span: int | None = BACKTEST_CHUNK_STEPS,
) -> Iterator[list[tuple[int, Values]]]:
    """The run's stored steps from `first` to `last` (its newest when None) in order, all
    keys merged: in lists covering `span` step numbers each, or one list when None."""
    keys = [
        key
        for key in repository.run_keys(session, run_id)
        if key.last_step is not None and key.last_step >= first
    ]
    newest = max((key.last_step for key in keys if key.last_step is not None), default=None)
    if newest is None:
        return
    last = newest if last is None else min(last, newest)
    step_span = last + 1 - first if span is None else span
    for lo in range(first, last + 1, step_span):
        hi = min(lo + step_span - 1, last)
        chunk: dict[int, Values] = {}
        for key in keys:
            for step, value, _ in storage.STORE.read_points(session, key.id, lo, hi):
                chunk.setdefault(step, {})[key.name] = float("nan") if value is None else value
        if chunk:
            yield sorted(chunk.items())


def replay_run(
    session: Session, run: Run, settings: Settings, thresholds: Mapping[str, Any]
) -> tuple[DetectorSuite, list[AlertEvent], int]:
    """A fresh suite fed every stored step of the run: it, its events, and how many steps."""
    suite = make_suite(run.config, settings, None, thresholds)
    events: list[AlertEvent] = []
    count = 0
    for chunk in stored_chunks(session, run.id):
        events += suite.feed_many(chunk)
        count += len(chunk)
    return suite, events, count


def replace_live(
    session: Session, run_id: str, suite: DetectorSuite, events: list[AlertEvent], generation: str
) -> None:
    """Replace the run's alerts and detector checkpoint with a replay's."""
    session.execute(delete(Alert).where(Alert.run_id == run_id))
    write_checkpoint(session, run_id, suite, None, generation)
    alerts.apply_events(session, run_id, events, webhooks=None)


def fold_events(events: Iterable[AlertEvent]) -> list[BacktestAlert]:
    """The alerts a sequence of events leaves behind, one per episode of (detector, key)."""
    episodes: list[BacktestAlert] = []
    current: dict[tuple[str, str], BacktestAlert] = {}
    for event in events:
        slot = (event.detector, event.key)
        alert = current.get(slot)
        if alert is None:
            if event.action != "resolve":
                current[slot] = _episode(event)
                episodes.append(current[slot])
            continue
        alert.last_step = event.last_step
        if event.action == "resolve":
            alert.status = "resolved"
            del current[slot]
        else:
            alert.severity, alert.message = event.severity, event.message
            alert.evidence, alert.advice = event.evidence, list(event.advice)
    return episodes


def _episode(event: AlertEvent) -> BacktestAlert:
    """The alert an opening event starts."""
    return BacktestAlert(
        detector=event.detector,
        key=event.key,
        severity=event.severity,
        status="open",
        secondary=event.secondary,
        first_step=event.first_step,
        last_step=event.last_step,
        message=event.message,
        evidence=event.evidence,
        advice=list(event.advice),
    )
