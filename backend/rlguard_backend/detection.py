"""Feeding a run's steps to its detectors, with their state kept in the database.

Every process can take the next batch of any run: the suite's state and the one step still being
filled (a trainer may log a step's metrics in several calls) live in ``detector_state``. A step
is fed once a later step has arrived, or when the run ends.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import orjson
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
from rlguard_backend.stability import AlertEvent, DetectorSuite, StepColumns

log = logging.getLogger("rlguard_backend.detection")
SUITE_ROW = "suite"
BACKTEST_CHUNK_STEPS = 5000
CACHED_SUITES = 256
Values = dict[str, float]
Pending = tuple[int, Values] | None  # the newest step, fed once a later one arrives


class SuiteCache:
    """Live suites of recently fed runs, so a process skips rebuilding one from JSON per batch.

    An entry (the suite and the step still pending) is used only when the stored state's
    ``generation`` is the one this process wrote last: another process feeding the run, a
    rollback or a backtest all change (or fail to advance) it, and the suite is then rebuilt
    from the database.
    """

    def __init__(self, size: int = CACHED_SUITES) -> None:
        self._size = size
        self._entries: OrderedDict[str, tuple[str, DetectorSuite, Pending]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, run_id: str, generation: str | None) -> tuple[DetectorSuite, Pending] | None:
        with self._lock:
            entry = self._entries.get(run_id)
            if entry is None or generation is None or entry[0] != generation:
                return None
            self._entries.move_to_end(run_id)
            return entry[1], entry[2]

    def put(self, run_id: str, generation: str, suite: DetectorSuite, pending: Pending) -> None:
        with self._lock:
            self._entries[run_id] = (generation, suite, pending)
            self._entries.move_to_end(run_id)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)


_SUITES = SuiteCache()


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


def detect_steps(
    session: Session,
    run_id: str,
    config: Mapping[str, Any],
    steps: Sequence[StepIn],
    settings: Settings,
    suites: SuiteCache = _SUITES,
    columns: Mapping[str, Sequence[float]] | None = None,
) -> list[Alert]:
    """Feed a batch's steps; returns the alerts it opened or escalated.

    The caller has read the run's ``config`` with its row locked (``ingest.lock_run``): the
    run row itself is loaded only for a webhook's payload. ``columns``, when given,
    are the steps' values by key (``ingest.Ingested.columns``): the detectors read them as
    they are.
    """
    # The usual batch finds this process's own suite still current: only the generation is
    # read, not the state.
    cached = suites.get(run_id, _stored_generation(session, run_id))
    if cached is None:
        row = _load_state(session, run_id)
        state = row.state if row is not None else {}
        try:
            cached = make_suite(config, settings, state.get("suite")), _decode(state.get("pending"))
        except ValueError as exc:
            # A state from another release of the detectors: rebuild it from the stored points
            # (which already hold this batch) rather than running blind.
            log.warning("rebuilding detector state of run %s: %s", run_id, exc)
            backtest(session, _run(session, run_id), settings, {}, apply=True)
            return _open_alerts(session, run_id)
    suite, pending = cached
    if columns is not None and _follows(suite.last_step, pending, steps):
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
    _save_state(session, run_id, suite, pending, suites)
    if not events:
        return []
    events = _latest_updates(events)
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


def _follows(last_fed: int | None, pending: Pending, steps: Sequence[StepIn]) -> bool:
    """Whether every step of the batch comes after the last one fed and the pending one."""
    if not steps:
        return False
    first = steps[0].step
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


def _latest_updates(events: list[AlertEvent]) -> list[AlertEvent]:
    """The events without the "update"s that a later update or escalation of the same alert
    in this batch overwrites: the stored alert ends the same, in fewer writes."""
    later: set[tuple[str, str]] = set()  # alerts whose every field a later event rewrites
    kept: list[AlertEvent] = []
    for event in reversed(events):
        slot = (event.detector, event.key)
        if event.action == "update" and slot in later:
            continue
        kept.append(event)
        if event.action in ("update", "escalate"):
            later.add(slot)
        else:
            later.discard(slot)
    kept.reverse()
    return kept


def _save_state(
    session: Session,
    run_id: str,
    suite: DetectorSuite,
    pending: Pending,
    suites: SuiteCache = _SUITES,
) -> None:
    """Store the suite's state as a new generation; this process keeps the live suite."""
    generation = uuid.uuid4().hex
    # dump_state and _encode leave no non-finite float, so orjson's JSON is exact.
    state = orjson.dumps({"suite": suite.dump_state(), "pending": _encode(pending)}).decode()
    params = (state, generation, suite.last_step, utcnow(), run_id, SUITE_ROW)
    if not sql.execute(session, _UPDATE_STATE, params):
        sql.execute(session, _INSERT_STATE, params)
    suites.put(run_id, generation, suite, pending)


def _open_alerts(session: Session, run_id: str) -> list[Alert]:
    query = select(Alert).where(Alert.run_id == run_id, Alert.status == "open")
    return list(session.scalars(query))


def flush_pending(session: Session, run: Run, settings: Settings) -> list[Alert]:
    """The run ended: feed the step that was waiting for a later one."""
    row = _load_state(session, run.id)
    if row is None or not row.state.get("pending"):
        return []
    suite = make_suite(run.config, settings, row.state.get("suite"))
    pending = _decode(row.state["pending"])
    assert pending is not None
    events = suite.feed(*pending)
    _save_state(session, run.id, suite, None)
    return alerts.apply_events(session, run.id, events, settings.webhooks)


def stored_steps(session: Session, run_id: str) -> Iterator[tuple[int, Values]]:
    """Every stored step of the run in order, all keys merged, read in bounded chunks."""
    keys = repository.run_keys(session, run_id)
    last = max((k.last_step for k in keys if k.last_step is not None), default=None)
    if last is None:
        return
    for lo in range(0, last + 1, BACKTEST_CHUNK_STEPS):
        hi = lo + BACKTEST_CHUNK_STEPS - 1
        chunk: dict[int, Values] = {}
        for key in keys:
            for step, value, _ in points.read_points(session, key.id, lo, hi):
                chunk.setdefault(step, {})[key.name] = float("nan") if value is None else value
        yield from sorted(chunk.items())


def backtest(
    session: Session, run: Run, settings: Settings, thresholds: Mapping[str, Any], apply: bool
) -> DetectResult:
    """Re-run the detectors over the stored run; with ``apply`` replace live alerts and state."""
    suite = make_suite(run.config, settings, None, thresholds)
    events: list[AlertEvent] = []
    count = 0
    batch: list[tuple[int, Values]] = []
    for entry in stored_steps(session, run.id):
        batch.append(entry)
        if len(batch) == BACKTEST_CHUNK_STEPS:
            events += suite.feed_many(batch)
            count, batch = count + len(batch), []
    events += suite.feed_many(batch)
    count += len(batch)
    if apply:
        session.execute(delete(Alert).where(Alert.run_id == run.id))
        _save_state(session, run.id, suite, None)
        alerts.apply_events(session, run.id, events, webhooks=[])
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
