"""Backtests: the detectors re-run over a run's stored points, optionally replacing its alerts."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

from sqlalchemy import delete
from sqlalchemy.orm import Session

from rlguard_backend.core.config import Settings
from rlguard_backend.detection import alerts
from rlguard_backend.detection.checkpoints import make_suite, write_checkpoint
from rlguard_backend.detection.suite_cache import Values
from rlguard_backend.models import Alert, MetricKey, Run
from rlguard_backend.schemas import BacktestAlert, DetectResult
from rlguard_backend.stability import AlertEvent, DetectorSuite
from rlguard_backend.store import repository, storage
from rlguard_backend.store.storage import Row

BACKTEST_CHUNK_POINTS = 5000  # of each key, per list of steps fed at once


class Replay(NamedTuple):
    """A fresh suite fed a run's stored steps, the events it raised, and how many steps."""

    suite: DetectorSuite
    events: list[AlertEvent]
    steps: int


class BacktestTooLong(Exception):
    """A backtest ran past its time limit; it names the step it reached and how to narrow it."""

    def __init__(self, limit_s: float, first: int, reached: int, last: int) -> None:
        super().__init__(
            f"the backtest ran past its limit of {limit_s:g} s (RLGUARD_BACKTEST_TIMEOUT_S) and "
            f"was cancelled at step {reached} of {first}..{last}; narrow it to a step range "
            f'with from_step and to_step, e.g. {{"from_step": {first}, "to_step": {reached}}} '
            f'then {{"from_step": {reached + 1}}}, or raise the limit'
        )
        self.limit_s, self.reached, self.last = limit_s, reached, last


def backtest(
    session: Session, run: Run, settings: Settings, thresholds: Mapping[str, Any], apply: bool
) -> DetectResult:
    """Re-run the detectors over the stored run; with ``apply`` replace live alerts and state.

    An applied state is a checkpoint, fed every stored step (none pending): the run's next
    batch continues from it with the server's thresholds, in any process.
    """
    replay = replay_run(session, run, settings, thresholds)
    if apply:
        return apply_replay(session, run, replay)
    return replay_result(run.id, replay, applied=False)


def apply_replay(session: Session, run: Run, replay: Replay) -> DetectResult:
    """Make a replay the run's live alerts and detector state, in the caller's write unit.

    The replay may have been read before this unit began (outside the write lock): the steps
    stored since after its last one are fed here first, so the state still covers every stored
    step. Call it with the run's row locked (``feed.run_for_update``).
    """
    suite, events, count = replay
    first = 0 if suite.last_step is None else suite.last_step + 1
    for chunk in stored_chunks(session, run.id, first):
        events = events + suite.feed_many(chunk)
        count += len(chunk)
    replace_live(session, run.id, suite, events, uuid.uuid4().hex)
    if run.status in repository.ENDED:  # an ended run's alerts are closed with it
        repository.close_alerts(session, run.id)
    return replay_result(run.id, Replay(suite, events, count), applied=True)


def replay_result(run_id: str, replay: Replay, applied: bool) -> DetectResult:
    """What a backtest answers: its steps, the alerts its events leave, the missing signals."""
    return DetectResult(
        run_id=run_id,
        steps=replay.steps,
        applied=applied,
        alerts=fold_events(replay.events),
        missing=replay.suite.missing(),
    )


def stored_chunks(
    session: Session,
    run_id: str,
    first: int = 0,
    last: int | None = None,
    span: int | None = BACKTEST_CHUNK_POINTS,
) -> Iterator[list[tuple[int, Values]]]:
    """The run's stored steps from `first` to `last` (its newest when None) in order, all
    keys merged: in lists of about `span` points of each key, or one list when None.

    Windows are cut by stored points, not step numbers: steps 2^40 apart cost what steps one
    apart do. A window ends at the last step of the first key whose read filled up, so every
    other key's points up to there were read with it and no step is split.
    """
    keys = [
        key
        for key in repository.run_keys(session, run_id)
        if key.last_step is not None and key.last_step >= first
    ]
    newest = max((key.last_step for key in keys if key.last_step is not None), default=None)
    if newest is None:
        return
    last = newest if last is None else min(last, newest)
    lo = first
    while lo <= last:
        reads = {key.name: _read_window(session, key, lo, last, span) for key in keys}
        full = [rows[-1][0] for rows in reads.values() if span is not None and len(rows) == span]
        hi = min(full, default=last)
        chunk: dict[int, Values] = {}
        for name, rows in reads.items():
            for step, value, _ in rows:
                if step <= hi:
                    chunk.setdefault(step, {})[name] = float("nan") if value is None else value
        if not chunk:
            return
        yield sorted(chunk.items())
        lo = hi + 1


def _read_window(session: Session, key: MetricKey, lo: int, hi: int, span: int | None) -> list[Row]:
    """The key's points from ``lo`` to ``hi``: all, or its first ``span``."""
    if key.last_step is None or key.last_step < lo:
        return []
    if span is None:
        return storage.STORE.read_points(session, key.id, lo, hi)
    return storage.STORE.read_first(session, key.id, lo, hi, span)


def replay_run(
    session: Session,
    run: Run,
    settings: Settings,
    thresholds: Mapping[str, Any],
    *,
    first: int = 0,
    last: int | None = None,
    timeout_s: float | None = None,
    config: Mapping[str, Any] | None = None,
) -> Replay:
    """A fresh suite fed the run's stored steps ``first..last`` (all by default): it, its
    events, and how many steps; ``BacktestTooLong`` past ``timeout_s``. The suite reads
    ``config`` (the run's when None)."""
    suite = make_suite(run.config if config is None else config, settings, None, thresholds)
    events: list[AlertEvent] = []
    count = 0
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    for chunk in stored_chunks(session, run.id, first, last):
        if deadline is not None and count and time.monotonic() > deadline:  # more to go
            reached = chunk[0][0] - 1
            raise BacktestTooLong(timeout_s or 0.0, first, reached, last or run.last_step or 0)
        events += suite.feed_many(chunk)
        count += len(chunk)
    return Replay(suite, events, count)


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
