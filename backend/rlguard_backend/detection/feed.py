"""Feeding a run's steps to its detectors, with their state kept in the database.

Every process can take the next batch of any run: the suite's state and the one step still being
filled (a trainer may log a step's metrics in several calls) live in ``detector_state``. A step
is fed once a later step has arrived, or when the run ends.

The state is a checkpoint (checkpoints.py), not rewritten after every batch: the process that
holds a run's live suite (suite_cache.py) writes it every ``detector_checkpoint_steps`` steps
(or ``detector_checkpoint_batches`` batches), and after any batch that is not a plain append.
Another process (or this one after a restart or a rollback) resumes from the checkpoint and
feeds the steps stored since, which are exactly the steps fed since: each was stored once, by a
batch that came after every step before it. Backtests are in backtests.py.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from rlguard.sample_signals import SIGNAL_KEYS as SAMPLE_SIGNAL_KEYS
from rlguard_backend.core.config import Settings
from rlguard_backend.detection import alerts
from rlguard_backend.detection.backtests import (
    BacktestTooLong,
    Replay,
    apply_replay,
    backtest,
    fold_events,
    replace_live,
    replay_result,
    replay_run,
    stored_chunks,
)
from rlguard_backend.detection.checkpoints import (
    decode_pending,
    load_checkpoint,
    make_suite,
    stored_generation,
    write_checkpoint,
)
from rlguard_backend.detection.suite_cache import (
    SUITES,
    Live,
    Pending,
    SuiteCache,
    Values,
    keep_on_commit,
)
from rlguard_backend.models import Alert, Run
from rlguard_backend.schemas import StepIn
from rlguard_backend.stability import DetectorSuite
from rlguard_backend.store import repository

log = logging.getLogger("rlguard_backend.detection.feed")

__all__ = [
    "SUITES",
    "BacktestTooLong",
    "Live",
    "Replay",
    "SuiteCache",
    "apply_replay",
    "backtest",
    "check_run_config",
    "detect_steps",
    "flush_pending",
    "fold_events",
    "live_suite",
    "make_suite",
    "replay_result",
    "replay_run",
    "run_for_update",
    "stored_chunks",
]


def check_run_config(config: Mapping[str, Any], settings: Settings) -> None:
    """Raise ValueError (naming the key) when the detectors cannot read this run config."""
    DetectorSuite(config, thresholds=settings.detector_thresholds)


def live_suite(
    session: Session,
    run_id: str,
    config: Mapping[str, Any],
    settings: Settings,
    stored_last_step: int | None,
    suites: SuiteCache = SUITES,
) -> Live:
    """The run's suite, fed every stored step but the newest (pending), for detect_steps.

    Call it with the run's row locked (``ingest.open_batch``), before the batch's points are
    stored: ``stored_last_step`` is the run's newest stored step then. The usual batch finds
    this process's own suite current: only the checkpoint's generation is read.
    """
    live = suites.take(run_id, stored_generation(session, run_id))
    if live is not None:
        return live
    row = load_checkpoint(session, run_id)
    if row is None:
        return Live(run_id, make_suite(config, settings), None, None, suites)
    try:
        suite = make_suite(config, settings, row.state.get("suite"))
    except ValueError as exc:
        # A state from another release of the detectors: rebuild it from the stored points
        # rather than running blind.
        log.warning("rebuilding detector state of run %s: %s", run_id, exc)
        return _rebuilt(session, _run(session, run_id), settings, suites)
    live = Live(run_id, suite, decode_pending(row.state.get("pending")), row.generation, suites)
    _catch_up(session, live, stored_last_step)
    return live


def _catch_up(session: Session, live: Live, stored_last_step: int | None) -> None:
    """Feed the steps stored after the checkpoint: the process that fed them has not written
    a checkpoint since. Their events were stored when they were first fed."""
    suite, pending = live.suite, live.pending
    newest = pending[0] if pending is not None else suite.last_step
    if stored_last_step is None or newest is None or stored_last_step <= newest:
        return
    first = pending[0] if suite.last_step is None else suite.last_step + 1  # type: ignore[index]
    # Checkpoints come every detector_checkpoint_steps steps fed: these are at most that
    # many, and one batch.
    for stored in stored_chunks(session, live.run_id, first, stored_last_step, span=None):
        suite.feed_many(stored[:-1])
        live.pending = stored[-1][0], suite.readable(stored[-1][1])


def _rebuilt(session: Session, run: Run, settings: Settings, suites: SuiteCache) -> Live:
    """The run's suite rebuilt from every stored point: alerts and state replaced."""
    suite, events, _ = replay_run(session, run, settings, {})
    generation = uuid.uuid4().hex
    replace_live(session, run.id, suite, events, generation)
    return Live(run.id, suite, None, generation, suites)


def detect_steps(
    session: Session,
    live: Live,
    steps: Sequence[StepIn],
    settings: Settings,
) -> list[Alert]:
    """Feed a batch's steps to the run's live suite (live_suite); returns the alerts it
    opened or escalated.

    The suite is cached for the run's next batch once the session commits; its state is
    written when a checkpoint is due (see the module).
    """
    suite = live.suite
    appended = _follows(suite.last_step, live.pending, steps)
    ready, pending = _ready_steps(suite.last_step, live.pending, steps)
    events = suite.feed_many(ready)
    # The pending step is kept (and stored) with only what the detectors will read.
    live.pending = None if pending is None else (pending[0], suite.readable(pending[1]))
    live.steps_ahead += len(steps)
    live.batches_ahead += 1
    if (
        live.restored
        or not appended  # the stored points no longer say what was fed: checkpoint
        or live.steps_ahead >= settings.detector_checkpoint_steps
        or live.batches_ahead >= settings.detector_checkpoint_batches
    ):
        _checkpoint(session, live)
    keep_on_commit(session, live)
    if not events:
        return []
    events = alerts.latest_updates(events)
    if all(event.action == "update" for event in events):  # open alerts still firing
        events = alerts.update_open(session, live.run_id, events)
        if not events:
            return []
    return alerts.apply_events(session, live.run_id, events, settings.webhooks)


def _run(session: Session, run_id: str) -> Run:
    """The run's row, already locked by the caller where the database has row locks."""
    run = session.get(Run, run_id)
    if run is None:
        raise repository.run_not_found(run_id)
    return run


def _follows(last_fed: int | None, pending: Pending, steps: Sequence[StepIn]) -> bool:
    """Whether every step of the batch comes after the last one fed and the pending one."""
    if not steps:
        return False
    first = min(entry.step for entry in steps)
    return (last_fed is None or first > last_fed) and (pending is None or first > pending[0])


def _ready_steps(
    last_fed: int | None, pending: Pending, steps: Iterable[StepIn]
) -> tuple[list[tuple[int, Values]], Pending]:
    """Steps that can be fed now (all but the newest), and the newest, still pending.

    A step's values are the batch's own dict unless two entries (or the pending step) merge
    into it: the suite only reads them. The sample signals of a step fed before (its samples
    came late) are seen at the first step fed from this batch on, or the pending one: the
    detectors read steps in order once (docs/detectors-samples.md, "Late samples").
    """
    merged: dict[int, Values] = {}
    copied: set[int] = set()  # steps whose dict is a merged copy
    late: Values = {}  # sample signals of steps already fed
    if pending is not None:
        merged[pending[0]] = dict(pending[1])
        copied.add(pending[0])
    for entry in steps:
        step = entry.step
        if last_fed is not None and step <= last_fed:
            late.update((k, v) for k, v in entry.values.items() if k in SAMPLE_SIGNAL_KEYS)
            continue
        values = merged.get(step)
        if values is None:
            merged[step] = entry.values
            continue
        if step not in copied:
            merged[step] = values = dict(values)
            copied.add(step)
        values.update(entry.values)
    if not merged:
        return [], None
    ordered = sorted(merged.items())
    if late:
        first, values = ordered[0]
        ordered[0] = first, {**late, **values}  # the step's own signals, if any, win
    return ordered[:-1], ordered[-1]


def _checkpoint(session: Session, live: Live) -> None:
    """Store the suite's state and pending step as a new checkpoint generation."""
    generation = uuid.uuid4().hex
    write_checkpoint(session, live.run_id, live.suite, live.pending, generation)
    live.generation, live.restored, live.steps_ahead, live.batches_ahead = generation, False, 0, 0


def flush_pending(
    session: Session, run: Run, settings: Settings, suites: SuiteCache = SUITES
) -> list[Alert]:
    """The run ended: feed the step that was waiting for a later one."""
    live = live_suite(session, run.id, run.config, settings, run.last_step, suites)
    if live.pending is None:  # nothing waits (or nothing was ever fed: no checkpoint)
        if not live.restored:  # this process's own, unchanged; one restored is not kept
            suites.put(live)  # without a checkpoint of its own (another process may hold it)
        return []
    events = live.suite.feed(*live.pending)
    live.pending = None
    _checkpoint(session, live)
    keep_on_commit(session, live)
    return alerts.apply_events(session, run.id, events, settings.webhooks)


def run_for_update(session: Session, run_id: str) -> Run:
    """The run, locked until commit on PostgreSQL so one process at a time feeds its detectors."""
    query = select(Run).where(Run.id == run_id)
    if session.get_bind().dialect.name != "sqlite":
        query = query.with_for_update()
    run = session.scalars(query).first()
    if run is None:
        raise repository.run_not_found(run_id)
    return run
