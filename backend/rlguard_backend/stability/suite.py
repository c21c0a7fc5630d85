"""DetectorSuite: feeds one run's steps to every detector and keeps their state resumable."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from itertools import chain
from operator import itemgetter
from typing import Any, overload

import numpy as np

from rlguard_backend.signals import ALIAS_PRIORITY, canonical_signal
from rlguard_backend.stability.base import Detector
from rlguard_backend.stability.clipfrac import ClipFraction
from rlguard_backend.stability.columns import Columns, Floats, Quiet
from rlguard_backend.stability.context import RunContext
from rlguard_backend.stability.entropy import EntropyCollapse
from rlguard_backend.stability.entropy_cov import EntropyCovLeading
from rlguard_backend.stability.events import AlertEvent
from rlguard_backend.stability.kl_controller import KlController
from rlguard_backend.stability.kl_penalty import KlPenalty
from rlguard_backend.stability.kl_reference import KlRunaway
from rlguard_backend.stability.kl_spike import KlSpike
from rlguard_backend.stability.length import LengthHacking
from rlguard_backend.stability.lifecycle import AlertBook
from rlguard_backend.stability.nonfinite import NonFinite
from rlguard_backend.stability.observations import Observations
from rlguard_backend.stability.thresholds import resolve_thresholds

# D1 runs first so that everything it marks as corrupted is known before the others speak.
DETECTOR_TYPES: tuple[type[Detector], ...] = (
    NonFinite,
    EntropyCollapse,
    EntropyCovLeading,
    KlRunaway,
    KlSpike,
    KlPenalty,
    ClipFraction,
    KlController,
    LengthHacking,
)
STATE_VERSION = 3  # 2: streaks are plain ints; 3: windows packed, their sizes not in state
MAX_CACHED_KEY_SETS = 64  # key sets planned per suite; a run logs one or a few
MIN_COLUMN_STEPS = 8  # fewer steps go through feed(): the columns' set-up would cost more
# After COLUMN_MISSES_IN_A_ROW column-wise attempts in a row that fed nothing (each followed
# by one step through feed()), feed() COLUMN_BACKOFF_STEPS steps before the next attempt; twice
# as many after one more miss, four times after two or more.
COLUMN_MISSES_IN_A_ROW = 3
COLUMN_BACKOFF_STEPS = 25
_NON_FINITE_STRINGS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class DetectorSuite:
    """All stability detectors of one run.

    >>> suite = DetectorSuite({"updates_per_batch": 4, "kl_placement": "loss", "kl_coef": 0.001})
    >>> suite.feed(0, {"actor/entropy": 0.53, "critic/score/mean": 0.2})
    []
    >>> state = suite.dump_state()  # store it; DetectorSuite(config, state=state) continues
    """

    def __init__(
        self,
        run_config: Mapping[str, Any] | None = None,
        thresholds: Mapping[str, Any] | None = None,
        state: Mapping[str, Any] | None = None,
    ) -> None:
        self._context = RunContext.from_config(run_config)
        resolved = resolve_thresholds(thresholds, self._context.thresholds)
        self._observations = Observations(self._context, resolved["common"])
        self._alerts = AlertBook(resolved["common"]["update_interval_steps"])
        self._detectors = [
            kind(self._context, resolved[kind.id], self._alerts.open_keys(kind.id))
            for kind in DETECTOR_TYPES
        ]
        self._last_step: int | None = None
        self._seen: set[str] = set()
        self._plans: dict[tuple[str, ...], _Plan] = {}
        self._last_plan: _Plan | None = None  # the previous step's
        self.fast_steps = 0  # steps fed column-wise (feed_many), over this object's life
        self._column_misses = 0  # column-wise attempts in a row that fed nothing
        self._column_wait = 0  # steps to feed() before the next column-wise attempt
        self._observations.view.emits = self._alerts.emits
        if state:
            self._load(_restore_non_finite(state))

    @property
    def last_step(self) -> int | None:
        return self._last_step

    def feed(self, step: int, values: Mapping[str, float]) -> list[AlertEvent]:
        """Run every detector on one step of raw metrics; steps already seen are ignored."""
        if self._last_step is not None and step <= self._last_step:
            return []
        self._last_step = step
        plan = self._plan_of(values)
        canonical, sources, finite = self._canonical(plan, values)
        view = self._observations.observe(step, canonical, sources, finite)
        alerts = self._alerts
        alerts.step = step
        events: list[AlertEvent] = []
        after_nan: bool | None = None
        # Each detector's verdicts are applied before the next one runs (it may read them:
        # emits(), open_keys). Usually no rule fires or clears: every verdict is None.
        for detector in plan.detectors:
            for verdict in detector.evaluate(view):
                if verdict is None:
                    continue
                if (detector.id, verdict.key) == NonFinite.PRIMARY:
                    secondary = False
                else:
                    if after_nan is None:  # D1's own verdict came first: settled by now
                        after_nan = self._after_nan()
                    secondary = after_nan
                event = alerts.apply(detector.id, verdict, step, secondary)
                if event is not None:
                    events.append(event)
        return events

    def feed_many(self, steps: Sequence[tuple[int, Mapping[str, float]]]) -> list[AlertEvent]:
        """feed() each step in order: the same events and the same state, usually faster.

        The steps that log the same keys, all finite floats, go column-wise wherever every
        detector can show that none of its rules fires or clears (columns.py); feed() takes
        the others, one at a time.
        """
        events: list[AlertEvent] = []
        at = 0
        if len(steps) > 1 and tuple(steps[0][1]) != tuple(steps[1][1]):
            # A batch's steps share their keys, but the step held back from the previous
            # batch (trimmed to the keys the detectors read) may lead it: fed first.
            step, values = steps[0]
            events += self.feed(step, values)
            self._column_wait -= 1
            at = 1
        cols = None
        if len(steps) - at >= MIN_COLUMN_STEPS and self._column_wait <= 0:
            with _ieee():
                cols = self._columns(steps[at:])  # None when these do not start column-wise
        start = at  # the columns' first step
        quiet: dict[int, tuple[int, Quiet]] = {}  # detector index -> (from column, its verdict)
        while at < len(steps):
            if cols is not None and cols.n - (at - start) >= MIN_COLUMN_STEPS:
                with _ieee():
                    done = self._feed_quiet(cols, at - start, quiet)
                # None fed: a rule speaks at once; feed() takes that step and the same
                # columns go on. Several such misses in a row: the run is busy: feed() the
                # next steps before trying again, twice as many after each further miss.
                self._column_misses = 0 if done else self._column_misses + 1
                misses = self._column_misses - COLUMN_MISSES_IN_A_ROW
                if misses >= 0:
                    self._column_wait = COLUMN_BACKOFF_STEPS << min(misses, 2)
                    cols = None
                at += done
            if at < len(steps):  # the step a rule fires or clears at, or one not column-wise
                step, values = steps[at]
                events += self.feed(step, values)
                self._column_wait -= 1
                at += 1
        return events

    def readable(self, values: Mapping[str, float]) -> dict[str, float]:
        """The entries of a step that feed() reads: those whose key maps to a signal.

        Feeding them alone gives the same events and state as feeding the whole step.
        """
        return {key: values[key] for key in self._plan_of(values).read}

    def readable_keys(self, keys: tuple[str, ...]) -> tuple[str, ...]:
        """The keys readable() keeps of a step that logs `keys`, in the order it keeps them."""
        return self._plan_of_keys(keys).read

    def missing(self) -> dict[str, str]:
        """Detector id -> why it is degraded or disabled (missing signals or run context)."""
        seen = frozenset(self._seen)
        reasons = {detector.id: detector.missing(seen) for detector in self._detectors}
        return {name: reason for name, reason in reasons.items() if reason}

    def dump_state(self) -> dict[str, Any]:
        """Everything needed to continue this run elsewhere; JSON-safe and of bounded size.

        A fresh structure: every part's dump is a copy with non-finite floats as strings.
        """
        return {
            "version": STATE_VERSION,
            "last_step": self._last_step,
            "seen": sorted(self._seen),
            "observations": self._observations.dump(),
            "alerts": {slot: dict(alert) for slot, alert in self._alerts.open.items()},
            "detectors": {detector.id: detector.dump() for detector in self._detectors},
        }

    def _load(self, state: Mapping[str, Any]) -> None:
        if state.get("version") != STATE_VERSION:
            raise ValueError(
                f"detector state version {state.get('version')!r} is not {STATE_VERSION}; "
                "drop the stored state to restart the detectors from the next step"
            )
        self._last_step = state["last_step"]
        self._seen = set(state["seen"])
        self._observations.load(state["observations"])
        self._alerts.load(state["alerts"])
        for detector in self._detectors:
            detector.load(state["detectors"][detector.id])

    def _plan(self, keys: tuple[str, ...]) -> _Plan:
        """For one set of raw keys: each canonical signal with its keys, best first."""
        aliases = self._context.signal_aliases
        candidates: dict[str, list[tuple[int, str]]] = {}
        for key in keys:
            name = canonical_signal(key, aliases)
            if name is not None:
                candidates.setdefault(name, []).append((_rank(key, aliases), key))
        ranked = {
            name: tuple(key for _, key in sorted(found)) for name, found in candidates.items()
        }
        singles = tuple((name, keys[0]) for name, keys in ranked.items() if len(keys) == 1)
        several = tuple((name, keys) for name, keys in ranked.items() if len(keys) > 1)
        # A detector none of whose signals these keys carry has nothing to do on their steps.
        detectors = [d for d in self._detectors if d.reads is None or d.reads & ranked.keys()]
        return _Plan(keys, singles, several, detectors)

    def _columns(self, steps: Sequence[tuple[int, Mapping[str, float]]]) -> Columns | None:
        """The Columns of the leading steps of `steps` that can go column-wise: past the last
        step fed, in step order, with this run's known key set, every value a finite float
        (MIN_COLUMN_STEPS at least); None when there are too few. Changes nothing."""
        last = self._last_step
        if last is None:
            return None
        if isinstance(steps, StepColumns):
            plan = self._plan_of_keys(steps.keys)
            numbers = steps.numbers()
            if plan.take is None or len(numbers) < MIN_COLUMN_STEPS or numbers[0] <= last:
                return None
            # One signal per row: the values as they came, no per-step work.
            matrix = np.array([steps.column(key) for _, key in plan.singles], dtype=np.float64)
            return self._finite_columns(plan, numbers, matrix)
        keys = tuple(steps[0][1])
        plan = self._plan_of(steps[0][1])
        take = plan.take
        if take is None:
            return None
        numbers = []
        rows = []
        for step, values in steps:
            if type(step) is not int or step <= last or tuple(values) != keys:
                break
            rows.append(take(values))
            numbers.append(step)
            last = step
        count = len(rows)
        if count < MIN_COLUMN_STEPS or set(map(type, chain.from_iterable(rows))) != _FLOATS_ONLY:
            return None
        width = len(plan.names)
        matrix = np.fromiter(chain.from_iterable(rows), np.float64, count * width)
        return self._finite_columns(plan, numbers, matrix.reshape(count, width).T)

    def _finite_columns(self, plan: _Plan, numbers: list[int], matrix: Floats) -> Columns | None:
        """_columns from the values of `plan.names` (one row each) at steps `numbers`: the
        steps before the first with a value that is not finite."""
        total = float(matrix.sum())  # huge finite values may sum to inf: checked below
        if total - total != 0.0:  # a value not finite (or a sum overflowed): check each
            finite = np.isfinite(matrix).all(axis=0)
            if not finite.all():  # the steps before the first one with such a value
                count = int(np.argmin(finite))
                if count < MIN_COLUMN_STEPS:
                    return None
                del numbers[count:]
                matrix = matrix[:, :count]
        columns = {name: matrix[j] for j, name in enumerate(plan.names)}
        cols = self._observations.columns(numbers, columns)
        if cols is None or (
            "kl_ref" in cols.values and not np.isfinite(cols.values["kl_ref"]).all()
        ):
            return None
        cols.alerts, cols.detectors, cols.names = self._alerts, plan.detectors, plan.names
        return cols

    def _feed_quiet(self, cols: Columns, at: int, quiet: dict[int, tuple[int, Quiet]]) -> int:
        """Feed the steps of `cols` from index `at` on for as long as no detector says
        anything; returns how many.

        `quiet` keeps each detector's verdict on the columns between calls for one batch: the
        observations of every step are in `cols` from the start, and a detector that was
        silent on the step feed() took in between (at - 1) is where its verdict said it would
        be, so only the detectors that spoke there look again (from the same arrays, where
        their verdict can: Quiet.again).
        """
        tail = None
        end = cols.n
        for index, detector in enumerate(cols.detectors):
            entry = quiet.get(index)
            if entry is not None and entry[0] + entry[1].steps < at:  # it spoke since
                entry = _resumed(entry, at)
            if entry is None:
                if tail is None:
                    tail = cols.tail(at) if at else cols
                entry = at, detector.quiet_prefix(tail)
            quiet[index] = entry
            end = min(end, entry[0] + entry[1].steps)
            if end <= at:
                return 0
        self._observations.advance(cols, at, end)
        for base, verdict in quiet.values():
            verdict.advance(at - base, end - base)
        self._seen.update(cols.names)
        self._last_step = cols.step_list[end - 1]
        self.fast_steps += end - at
        return end - at

    def _after_nan(self) -> bool:
        """Alerts raised while D1's non-finite CRITICAL is open are secondary to it."""
        return self._alerts.severity(*NonFinite.PRIMARY) == "critical"

    def _plan_of(self, values: Mapping[str, float]) -> _Plan:
        """The plan of this step's key set: steps repeat the same keys, so it is made once."""
        return self._plan_of_keys(tuple(values))

    def _plan_of_keys(self, keys: tuple[str, ...]) -> _Plan:
        plan = self._last_plan
        if plan is None or plan.keys != keys:  # equal tuples of the same strings: fast
            plan = self._plans.get(keys) or self._new_plan(keys)
            self._last_plan = plan
        return plan

    def _canonical(
        self, plan: _Plan, values: Mapping[str, float]
    ) -> tuple[dict[str, float], dict[str, str], dict[str, float]]:
        """Map raw keys to canonical signals; user aliases first, then table order.

        Returns the canonical values, the raw key each came from, and the finite values (the
        first dict itself when every value is finite).
        """
        if plan.take is not None:
            # The usual step: one key per signal, every value a float. Checked in two C-level
            # passes (the types, then the sum: finite only if every value is).
            raw = plan.take(values)
            if set(map(type, raw)) == _FLOATS_ONLY:
                canonical = dict(zip(plan.names, raw, strict=True))
                if plan.seen is not self._seen:
                    self._seen.update(plan.names)
                    plan.seen = self._seen
                total = sum(raw)
                if total - total == 0.0:
                    return canonical, plan.sources, canonical
                return canonical, plan.sources, _finite(canonical)
        return self._canonical_slowly(plan, values)

    def _new_plan(self, keys: tuple[str, ...]) -> _Plan:
        plan = self._plan(keys)
        if len(self._plans) < MAX_CACHED_KEY_SETS:
            self._plans[keys] = plan
        return plan

    def _canonical_slowly(
        self, plan: _Plan, values: Mapping[str, float]
    ) -> tuple[dict[str, float], dict[str, str], dict[str, float]]:
        """_canonical for any step: non-float values, several keys for one signal."""
        canonical: dict[str, float] = {}
        sources: dict[str, str] = {}
        for name, key in plan.singles:
            value = _as_float(values[key])
            if value is not None:
                canonical[name] = value
                sources[name] = key
        for name, candidates in plan.several:
            for key in candidates:
                choice = _as_float(values[key])
                if choice is not None:
                    canonical[name] = choice
                    sources[name] = key
                    break
        self._seen.update(canonical)
        finite = _finite(canonical)
        return canonical, sources, canonical if len(finite) == len(canonical) else finite


def _resumed(entry: tuple[int, Quiet], at: int) -> tuple[int, Quiet] | None:
    """A detector's verdict (from column `base` on) after it spoke at the step feed() just
    took, at - 1, carried on from the same arrays; None when it must look afresh."""
    base, verdict = entry
    if verdict.again is None or base + verdict.steps != at - 1:
        return None
    steps = verdict.again(at - base)
    return None if steps is None else (base, verdict._replace(steps=steps))


class StepColumns(Sequence[tuple[int, dict[str, float]]]):
    """Steps given column-wise, as the ingest holds a batch: step ``steps[i]`` logs
    ``columns[key][i]`` for every key; the steps strictly increasing, every value a float (as
    the ingest's schema makes them). feed_many reads the columns as they are; indexing
    builds one step's dict, and slicing gives a StepColumns of the same columns."""

    def __init__(
        self,
        steps: Sequence[int],
        columns: Mapping[str, Sequence[float]],
        start: int = 0,
        stop: int | None = None,
    ) -> None:
        self.steps, self.columns, self.keys = steps, columns, tuple(columns)
        self.start, self.stop = start, len(steps) if stop is None else stop

    def __len__(self) -> int:
        return self.stop - self.start

    @overload
    def __getitem__(self, index: int) -> tuple[int, dict[str, float]]: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[tuple[int, dict[str, float]]]: ...

    def __getitem__(
        self, index: int | slice
    ) -> tuple[int, dict[str, float]] | Sequence[tuple[int, dict[str, float]]]:
        if isinstance(index, slice):
            start, stop, stride = index.indices(len(self))
            if stride != 1:
                return [self[i] for i in range(start, stop, stride)]
            return StepColumns(
                self.steps, self.columns, self.start + start, self.start + max(start, stop)
            )
        at = index + len(self) if index < 0 else index
        if not 0 <= at < len(self):
            raise IndexError(f"step index {index} out of range for {len(self)} steps")
        at += self.start
        return self.steps[at], {key: column[at] for key, column in self.columns.items()}

    def numbers(self) -> list[int]:
        return list(self.steps[self.start : self.stop])

    def column(self, key: str) -> Sequence[float]:
        return self.columns[key][self.start : self.stop]


class _Plan:
    """How one set of raw keys maps onto canonical signals."""

    __slots__ = (
        "detectors",
        "keys",
        "names",
        "read",
        "seen",
        "several",
        "singles",
        "sources",
        "take",
    )

    def __init__(
        self,
        keys: tuple[str, ...],
        singles: tuple[tuple[str, str], ...],  # (signal, its one raw key)
        several: tuple[tuple[str, tuple[str, ...]], ...],  # (signal, its raw keys best first)
        detectors: list[Detector],  # the detectors with something to read, in order
    ) -> None:
        self.keys, self.singles, self.several = keys, singles, several
        self.detectors = detectors
        self.names = tuple(name for name, _ in singles)
        self.read = tuple(key for _, key in singles) + tuple(k for _, ks in several for k in ks)
        self.sources = dict(singles)  # shared by the steps of this plan: never changed
        self.seen: set[str] | None = None  # the suite's `seen` set once it holds `names`
        # raw values -> tuple of the single-key signals' values, when that is the whole plan
        self.take: Callable[[Mapping[str, float]], tuple[Any, ...]] | None = None
        if not several and len(singles) > 1:
            self.take = itemgetter(*(key for _, key in singles))


_FLOATS_ONLY = {float}


def _ieee() -> np.errstate:
    """Overflow to inf and the like, silently, as Python's float arithmetic does in feed()."""
    return np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore")


def _finite(values: dict[str, float]) -> dict[str, float]:
    """The finite entries (x - x is 0.0 only for finite x; NaN and ±inf give NaN)."""
    return {name: value for name, value in values.items() if value - value == 0.0}


def _rank(key: str, aliases: Mapping[str, str | None] | None) -> int:
    """User aliases beat the table; within the table, the order of METRICS.md keys."""
    return -1 if aliases and key in aliases else ALIAS_PRIORITY.get(key, len(ALIAS_PRIORITY))


def _as_float(raw: Any) -> float | None:
    if type(raw) is float:
        return raw
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        return None
    return float(raw)


def _restore_non_finite(value: Any) -> Any:
    """Inverse of json_safe for the strings it writes."""
    if isinstance(value, str):
        return _NON_FINITE_STRINGS.get(value, value)
    if isinstance(value, Mapping):
        return {key: _restore_non_finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_restore_non_finite(item) for item in value]
    return value
