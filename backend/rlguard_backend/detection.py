"""Feeding a run's steps to its detectors, with their state kept in the database.

Every process can take the next batch of any run: the suite's state and the one step still being
filled (a trainer may log a step's metrics in several calls) live in ``detector_state``. A step
is fed once a later step has arrived, or when the run ends.

The state is a checkpoint, not rewritten after every batch: the process that holds a run's live
suite writes it every CHECKPOINT_STEPS steps (or CHECKPOINT_BATCHES batches), and after any batch
that is not a plain append. Another process (or this one after a restart or a rollback) resumes
from the checkpoint and feeds the steps stored since, which are exactly the steps fed since:
each was stored once, by a batch that came after every step before it.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import sqlalchemy
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from rlguard_backend import alerts, points, repository, sql
from rlguard_backend.config import Settings
from rlguard_backend.models import Alert, DetectorState, Run, utcnow
from rlguard_backend.schemas import (
    BacktestAlert,
    DetectResult,
    StepIn,
    float_to_wire,
)
from rlguard_backend.stability import AlertEvent, DetectorSuite, StepColumns, latest_updates

log = logging.getLogger("rlguard_backend.detection")
SUITE_ROW = "suite"
BACKTEST_CHUNK_STEPS = 5000
CACHED_SUITES = 256
# A live suite's state is checkpointed once it has fed this many steps, or batches, since the
# last checkpoint: what another process replays from the stored points when it takes over.
CHECKPOINT_STEPS = 5000
CHECKPOINT_BATCHES = 100
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

    A unit of work takes a run's entry out (take) and puts it back once it commits (through
    Session.info and the after_commit event): a rollback leaves no suite ahead of the database.
    An entry is used only when the stored checkpoint's ``generation`` is the one it continues:
    another process feeding the run, a backtest or a rewind write a new one.
    """

    def __init__(self, size: int = CACHED_SUITES) -> None:
        self._size = size
        self._entries: OrderedDict[str, Live] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, run_id: str, generation: str | None) -> Live | None:
        with self._lock:
            live = self._entries.pop(run_id, None)
        if live is None or generation is None or live.generation != generation:
            return None
        return live

    def peek(self, run_id: str) -> Live | None:
        with self._lock:
            return self._entries.get(run_id)

    def put(self, live: Live) -> None:
        with self._lock:
            self._entries[live.run_id] = live
            self._entries.move_to_end(live.run_id)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)


_SUITES = SuiteCache()


def _keep(session: Session, live: Live) -> None:
    """Cache `live` once the session commits (dropped if it rolls back)."""
    session.info.setdefault(_KEEP, []).append(live)


@sqlalchemy.event.listens_for(Session, "after_commit")
def _after_commit(session: Session) -> None:
    for live in session.info.pop(_KEEP, ()):
        live.cache.put(live)


@sqlalchemy.event.listens_for(Session, "after_rollback")
def _after_rollback(session: Session) -> None:
    session.info.pop(_KEEP, None)


def _load_state(session: Session, run_id: str) -> DetectorState | None:
    return session.get(DetectorState, (run_id, SUITE_ROW))


# The per-batch statements on detector_state, as plain SQL: the ORM's and Core's own work per
# statement cost more than the statements themselves.
_READ_GENERATION = "SELECT generation FROM detector_state WHERE run_id = ? AND detector = ?"
_UPDATE_STATE = (
    "UPDATE detector_state SET state = ?, generation = ?, last_step = ?, updated_at = ? "
    "WHERE run_id = ? AND detector = ?"
)
_INSERT_STATE = (
    "INSERT INTO detector_state (state, generation, last_step, updated_at, run_id, detector) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)


def _stored_generation(session: Session, run_id: str) -> str | None:
    """The generation of the run's stored state, read without the state itself."""
    found = sql.fetchall(session, _READ_GENERATION, (run_id, SUITE_ROW))
    return found[0][0] if found else None


def _encode(pending: Pending) -> dict[str, Any] | None:
    if pending is None:
        return None
    step, values = pending
    return {"step": step, "values": {k: float_to_wire(v) for k, v in values.items()}}


def _decode(raw: Mapping[str, Any] | None) -> Pending:
    if not raw:
        return None
    return int(raw["step"]), {k: float(v) for k, v in raw["values"].items()}


def make_suite(
    config: Mapping[str, Any] | None,
    settings: Settings,
    state: Mapping[str, Any] | None = None,
    thresholds: Mapping[str, Any] | None = None,
) -> DetectorSuite:
    server = {**settings.detector_thresholds, **(thresholds or {})}
    return DetectorSuite(config or {}, thresholds=server, state=state)


def check_run_config(config: Mapping[str, Any], settings: Settings) -> None:
    """Raise ValueError (naming the key) when the detectors cannot read this run config."""
    DetectorSuite(config, thresholds=settings.detector_thresholds)


def live_suite(
    session: Session,
    run_id: str,
    config: Mapping[str, Any],
    settings: Settings,
    stored_last_step: int | None,
    suites: SuiteCache = _SUITES,
) -> Live:
    """The run's suite, fed every stored step but the newest (pending), for detect_steps.

    Call it with the run's row locked (``ingest.open_batch``), before the batch's points are
    stored: ``stored_last_step`` is the run's newest stored step then. The usual batch finds
    this process's own suite current: only the checkpoint's generation is read.
    """
    live = suites.take(run_id, _stored_generation(session, run_id))
    if live is not None:
        return live
    row = _load_state(session, run_id)
    if row is None:
        return Live(run_id, make_suite(config, settings), None, None, suites)
    state = row.state
    try:
        suite = make_suite(config, settings, state.get("suite"))
    except ValueError as exc:
        # A state from another release of the detectors: rebuild it from the stored points
        # rather than running blind.
        log.warning("rebuilding detector state of run %s: %s", run_id, exc)
        return _rebuilt(session, _run(session, run_id), settings, suites)
    live = Live(run_id, suite, _decode(state.get("pending")), row.generation, suites)
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
    # Checkpoints come every CHECKPOINT_STEPS steps fed: these are at most that many, and
    # one batch.
    for stored in stored_chunks(session, live.run_id, first, stored_last_step, span=None):
        suite.feed_many(stored[:-1])
        live.pending = stored[-1][0], suite.readable(stored[-1][1])


def _rebuilt(session: Session, run: Run, settings: Settings, suites: SuiteCache) -> Live:
    """The run's suite rebuilt from every stored point: alerts and state replaced."""
    suite, events, _ = _replay_run(session, run, settings, {})
    generation = uuid.uuid4().hex
    _replace_live(session, run.id, suite, events, generation)
    return Live(run.id, suite, None, generation, suites)


def detect_steps(
    session: Session,
    live: Live,
    steps: Sequence[StepIn],
    settings: Settings,
    columns: Mapping[str, Sequence[float]] | None = None,
) -> list[Alert]:
    """Feed a batch's steps to the run's live suite (live_suite); returns the alerts it
    opened or escalated.

    ``columns``, when given, are the steps' values by key (``ingest.Ingested.columns``): the
    detectors read them as they are. The suite is cached for the run's next batch once the
    session commits; its state is written when a checkpoint is due (see the module).
    """
    suite, pending, run_id = live.suite, live.pending, live.run_id
    appended = _follows(suite.last_step, pending, steps, in_order=columns is not None)
    if columns is not None and appended:
        # The usual batch: new steps after the pending one, whose values need no merging.
        # Only the keys the detectors read: the pending step, kept with those alone, then
        # joins the batch's columns when it logged the same ones.
        read = suite.readable_keys(tuple(columns))
        numbers = [entry.step for entry in steps]
        if pending is not None and tuple(pending[1]) == read:
            values = pending[1]
            numbers.insert(0, pending[0])
            batch = StepColumns(numbers, {key: (values[key], *columns[key]) for key in read})
            events = []
        else:
            events = suite.feed(*pending) if pending is not None else []
            batch = StepColumns(numbers, {key: columns[key] for key in read})
        events += suite.feed_many(batch[:-1])
        pending = batch[-1]
    else:
        ready, pending = _ready_steps(suite.last_step, pending, steps)
        events = suite.feed_many(ready)
    if pending is not None:  # kept (and stored) with only what the detectors will read
        pending = pending[0], suite.readable(pending[1])
    live.pending = pending
    live.steps_ahead += len(steps)
    live.batches_ahead += 1
    if (
        live.restored
        or not appended  # the stored points no longer say what was fed: checkpoint
        or live.steps_ahead >= CHECKPOINT_STEPS
        or live.batches_ahead >= CHECKPOINT_BATCHES
    ):
        _checkpoint(session, live)
    _keep(session, live)
    if not events:
        return []
    events = latest_updates(events)
    if all(event.action == "update" for event in events):  # open alerts still firing
        events = alerts.update_open(session, run_id, events)
        if not events:
            return []
    return alerts.apply_events(session, run_id, events, settings.webhooks)


def _run(session: Session, run_id: str) -> Run:
    """The run's row, already locked by the caller where the database has row locks."""
    run = session.get(Run, run_id)
    if run is None:
        raise repository.run_not_found(run_id)
    return run


def _follows(
    last_fed: int | None, pending: Pending, steps: Sequence[StepIn], in_order: bool
) -> bool:
    """Whether every step of the batch comes after the last one fed and the pending one;
    `in_order`: the steps are strictly increasing (as when the ingest made columns)."""
    if not steps:
        return False
    first = steps[0].step if in_order else min(entry.step for entry in steps)
    return (last_fed is None or first > last_fed) and (pending is None or first > pending[0])


def _ready_steps(
    last_fed: int | None, pending: Pending, steps: Iterable[StepIn]
) -> tuple[list[tuple[int, Values]], Pending]:
    """Steps that can be fed now (all but the newest), and the newest, still pending.

    A step's values are the batch's own dict unless two entries (or the pending step) merge
    into it: the suite only reads them.
    """
    merged: dict[int, Values] = {}
    copied: set[int] = set()  # steps whose dict is a merged copy
    if pending is not None:
        merged[pending[0]] = dict(pending[1])
        copied.add(pending[0])
    for entry in steps:
        step = entry.step
        if last_fed is not None and step <= last_fed:
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
    return ordered[:-1], ordered[-1]


def _checkpoint(session: Session, live: Live) -> None:
    """Store the suite's state and pending step as a new checkpoint generation."""
    generation = uuid.uuid4().hex
    _write_state(session, live.run_id, live.suite, live.pending, generation)
    live.generation, live.restored, live.steps_ahead, live.batches_ahead = generation, False, 0, 0


def _write_state(
    session: Session, run_id: str, suite: DetectorSuite, pending: Pending, generation: str
) -> None:
    # dump_state and _encode leave no non-finite float, so orjson's JSON is exact.
    state = orjson.dumps({"suite": suite.dump_state(), "pending": _encode(pending)}).decode()
    params = (state, generation, suite.last_step, utcnow(), run_id, SUITE_ROW)
    if not sql.execute(session, _UPDATE_STATE, params):
        sql.execute(session, _INSERT_STATE, params)


def flush_pending(
    session: Session, run: Run, settings: Settings, suites: SuiteCache = _SUITES
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
    _keep(session, live)
    return alerts.apply_events(session, run.id, events, settings.webhooks)


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
            for step, value, _ in points.read_points(session, key.id, lo, hi):
                chunk.setdefault(step, {})[key.name] = float("nan") if value is None else value
        if chunk:
            yield sorted(chunk.items())


def _replay_run(
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


def _replace_live(
    session: Session, run_id: str, suite: DetectorSuite, events: list[AlertEvent], generation: str
) -> None:
    """Replace the run's alerts and detector state with a replay's."""
    session.execute(delete(Alert).where(Alert.run_id == run_id))
    _write_state(session, run_id, suite, None, generation)
    alerts.apply_events(session, run_id, events, webhooks=[])


def backtest(
    session: Session, run: Run, settings: Settings, thresholds: Mapping[str, Any], apply: bool
) -> DetectResult:
    """Re-run the detectors over the stored run; with ``apply`` replace live alerts and state.

    An applied state is a checkpoint, fed every stored step (none pending): the run's next
    batch continues from it with the server's thresholds, in any process.
    """
    suite, events, count = _replay_run(session, run, settings, thresholds)
    if apply:
        _replace_live(session, run.id, suite, events, uuid.uuid4().hex)
    return DetectResult(
        run_id=run.id,
        steps=count,
        applied=apply,
        alerts=fold_events(events),
        missing=suite.missing(),
    )


def fold_events(events: Iterable[AlertEvent]) -> list[BacktestAlert]:
    """The alerts a sequence of events leaves behind, one per episode of (detector, key)."""
    episodes: list[BacktestAlert] = []
    current: dict[tuple[str, str], BacktestAlert] = {}
    for event in events:
        slot = (event.detector, event.key)
        alert = current.get(slot)
        if alert is None:
            if event.action == "resolve":
                continue
            alert = BacktestAlert(
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
            current[slot] = alert
            episodes.append(alert)
            continue
        alert.last_step = event.last_step
        if event.action == "resolve":
            alert.status = "resolved"
            del current[slot]
        else:
            alert.severity, alert.message = event.severity, event.message
            alert.evidence, alert.advice = event.evidence, list(event.advice)
    return episodes


def run_for_update(session: Session, run_id: str) -> Run:
    """The run, locked until commit on PostgreSQL so one process at a time feeds its detectors."""
    query = select(Run).where(Run.id == run_id)
    if session.get_bind().dialect.name != "sqlite":
        query = query.with_for_update()
    run = session.scalars(query).first()
    if run is None:
        raise repository.run_not_found(run_id)
    return run
