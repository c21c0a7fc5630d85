"""What the sender does with queued ``log()`` entries: read their values into packed batches.

A drain is read in chunks of ``CHUNK_STEPS`` entries. A chunk of the usual entries (plain
dicts of plain numbers, one set of keys, int steps rising after the batch's last) is read in a
few C-level passes: each step's values in one ``itemgetter`` call (the keys checked once per
set of keys), their types in one pass, the rows packed with ``starmap``. Any other chunk goes
entry by entry, and anything unusual in it — numpy scalars, tensors (one transfer per device),
non-numbers (skipped, warned about once per key), a step logged again — through
``_wire.convert_values``; both give the same points (``tests/hook/test_packed.py``).
"""

from __future__ import annotations

import operator
import struct
import time
import uuid
from collections.abc import Callable
from itertools import chain
from typing import Any

from rlguard import _packed, _wire
from rlguard._report import Counters, Warnings
from rlguard.protocol import MAX_KEY_CHARS, MAX_STEP, from_wire

PLAIN_TYPES = frozenset({float, int, bool})
_INT_ONLY = {int}
_DICT_ONLY = {dict}
CHUNK_STEPS = 256  # entries read together; one odd entry sends its chunk entry by entry
_STEP, _TIME, _METRICS = (operator.itemgetter(i) for i in range(3))  # of a log() entry
Deliver = Callable[[str, int, bytes], None]  # (batch_id, points, body)


class PointBatcher:
    """Packs ``(step, time, metrics)`` entries into batches of at most ``max_points`` points
    and hands each full batch to ``deliver``."""

    def __init__(
        self, max_points: int, counters: Counters, warnings: Warnings, deliver: Deliver
    ) -> None:
        self.max_points = max_points
        self._counters = counters
        self._warnings = warnings
        self._deliver = deliver
        self._batch = _packed.PackedBatch()
        self._checked_keys: tuple[str, ...] = ()
        self._reader_keys: tuple[str, ...] = ()
        self._reader: Callable[[dict[str, Any]], tuple[Any, ...]] = tuple

    def __repr__(self) -> str:
        return f"PointBatcher(max_points={self.max_points}, pending={self._batch.points})"

    def add(self, entry: tuple[Any, float, dict[Any, Any]]) -> None:
        """Read one ``log()`` entry into the batch; ship the batch once it is full."""
        step, when, metrics = entry
        if not metrics:
            return
        if type(step) is not int or not 0 <= step <= MAX_STEP:
            step = self._valid_step(step)
            if step is None:
                return
        keys = tuple(metrics)
        if keys == self._checked_keys:
            keys = self._checked_keys  # the same tuple: the batch's own key check is quick
        elif not self._keys_valid(keys):
            self._add_converted(step, when, metrics)
            return self._ship_if_full()
        if PLAIN_TYPES.issuperset(map(type, metrics.values())):
            try:
                self._batch.add(step, when, keys, metrics.values())
            except (OverflowError, struct.error):  # an int beyond float range: skipped below
                self._add_converted(step, when, metrics)
        else:
            self._add_converted(step, when, metrics)
        self._ship_if_full()

    def add_all(
        self, entries: list[tuple[Any, float, dict[Any, Any]]], signals: dict[int, dict]
    ) -> None:
        """Read one drain's ``log()`` entries, and each step's sample signals (``signals``, by
        step) right after that step's entry, or at the end for steps logged before."""
        if not signals:
            for start in range(0, len(entries), CHUNK_STEPS):
                chunk = entries[start : start + CHUNK_STEPS]
                if not self._add_usual(chunk):
                    for entry in chunk:
                        self.add(entry)
            return
        for entry in entries:
            self.add(entry)
            if entry[0] in signals:
                self.add((entry[0], entry[1], signals.pop(entry[0])))
        for step, values in signals.items():  # samples of steps whose metrics came earlier
            self.add((step, time.time(), values))

    def _add_usual(self, entries: list[tuple[Any, float, dict[Any, Any]]]) -> bool:
        """Add entries of the usual shape (int steps rising after the batch's last, plain dicts
        of one set of valid keys, plain numbers) in a few C-level passes, not a call per
        entry; False, with nothing added, for any other."""
        steps = list(map(_STEP, entries))
        dicts = list(map(_METRICS, entries))
        keys = self._keys_of(dicts[0])
        if keys is None:
            return False
        width = len(keys)
        if (
            set(map(type, steps)) != _INT_ONLY
            or set(map(type, dicts)) != _DICT_ONLY  # a subclass may answer a missing key
            or not self._batch.last_step < steps[0]
            or steps[-1] > MAX_STEP
            or not all(map(operator.lt, steps, steps[1:]))
            or not all(map(width.__eq__, map(len, dicts)))
        ):
            return False
        try:  # each step's values in the order of ``keys``: a KeyError means other keys
            rows = list(map(self._row_reader(keys), dicts))
        except KeyError:
            return False
        if not _all_plain_numbers(list(map(type, chain.from_iterable(rows)))):
            return False
        times = list(map(_TIME, entries))
        start = 0
        while start < len(steps):  # batches of max_points, as add() ships them
            room = max(1, -(-(self.max_points - self._batch.points) // width))
            end = start + room
            try:
                self._batch.add_rows(keys, steps[start:end], times[start:end], rows[start:end])
            except (OverflowError, struct.error):  # an int beyond float range: add() skips it
                for entry in entries[start:]:
                    self.add(entry)
                return True
            self._ship_if_full()
            start = end
        return True

    def _keys_of(self, metrics: dict[Any, Any]) -> tuple[str, ...] | None:
        """The keys of ``metrics`` as the batches know them, or None when not all are valid."""
        keys = tuple(metrics)
        if keys == self._checked_keys:
            return self._checked_keys
        return keys if keys and self._keys_valid(keys) else None

    def _row_reader(self, keys: tuple[str, ...]) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
        """A function giving a dict's values in the order of ``keys`` (KeyError: one lacks)."""
        if self._reader_keys is not keys:
            getter = operator.itemgetter(*keys)
            self._reader = getter if len(keys) > 1 else lambda metrics: (getter(metrics),)
            self._reader_keys = keys
        return self._reader

    def _ship_if_full(self) -> None:
        if self._batch.points >= self.max_points:
            self.ship()

    def ship(self) -> None:
        """Deliver what the batch holds."""
        batch, self._batch = self._batch, _packed.PackedBatch()
        if batch.points:
            self._counters.logged += batch.points
            batch_id = uuid.uuid4().hex
            self._deliver(batch_id, batch.points, batch.encode(batch_id))

    def _keys_valid(self, keys: tuple[Any, ...]) -> bool:
        if all(type(k) is str and 0 < len(k) <= MAX_KEY_CHARS for k in keys):
            self._checked_keys = keys
            return True
        return False

    def _valid_step(self, raw_step: Any) -> int | None:
        step = _wire.to_step(raw_step)
        if step is None:
            self._warnings.warn_once(
                "step",
                f"rlguard: log() step must be an int >= 0, got {raw_step!r}; "
                "that call was dropped (shown once)",
            )
            self._counters.dropped_steps += 1
        return step

    def _add_converted(self, step: int, when: float, metrics: dict[Any, Any]) -> None:
        try:
            values, skipped = _wire.convert_values(metrics)
        except Exception as exc:  # a user object whose conversion raised: report, keep going
            self._warnings.warn_once(
                f"convert:{type(exc).__name__}",
                f"rlguard: cannot read the values "
                f"logged at step {step} ({exc!r}); that call was dropped (shown once)",
            )
            self._counters.dropped_steps += 1
            return
        self._counters.skipped += len(skipped)
        for key in skipped:
            self._warnings.warn_once(
                f"key:{key}",
                f"rlguard: {key!r} is not a number (logged "
                f"{type(metrics.get(key)).__name__}); skipped (shown once per key)",
            )
        if values:
            floats = [from_wire(value) for value in values.values()]
            self._batch.add(step, when, tuple(values), floats)


def _all_plain_numbers(types: list[type]) -> bool:
    """True when ``types`` are all float, int or bool (floats counted first: the usual), or
    float subclasses: verl logs ``numpy.float64`` (a float subclass, packed as its value)."""
    floats = types.count(float)
    if floats == len(types) or floats + types.count(int) + types.count(bool) == len(types):
        return True
    return all(kind in PLAIN_TYPES or issubclass(kind, float) for kind in set(types))
