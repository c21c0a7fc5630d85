"""The packed points body the hook sends: blocks, step merging, filtering, the JSON fallback."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
import torch

from rlguard import _packed, _wire
from rlguard._points import PointBatcher
from rlguard._report import Counters, Warnings
from rlguard.protocol import from_wire


def _rows(body: bytes) -> list[tuple[int, float, dict[str, float]]]:
    _, blocks = _packed.decode(body)
    return [row for block in blocks for row in block.rows_as_dicts()]


def test_packed_batch_round_trips_steps_times_and_non_finite_values() -> None:
    batch = _packed.PackedBatch()
    batch.add(0, 10.5, ("a", "b"), [0.25, math.nan])
    batch.add(1, 11.5, ("a", "b"), [math.inf, -math.inf])
    batch.add(2, 12.5, ("a", "b"), [3, True])
    body = batch.encode("b1")
    assert _packed.is_packed(body) and batch.points == 6
    batch_id, blocks = _packed.decode(body)
    assert batch_id == "b1" and len(blocks) == 1
    (s0, t0, v0), (s1, _, v1), (s2, _, v2) = _rows(body)
    assert (s0, t0, v0["a"]) == (0, 10.5, 0.25) and math.isnan(v0["b"])
    assert (s1, v1) == (1, {"a": math.inf, "b": -math.inf})
    assert (s2, v2) == (2, {"a": 3.0, "b": 1.0})


@pytest.mark.parametrize(
    ("entries", "expected", "blocks"),
    [
        # each change of keys starts a block
        (
            [(0, ("a",), [1.0]), (1, ("a", "b"), [2.0, 3.0]), (2, ("a", "b"), [4.0, 5.0])],
            [(0, {"a": 1.0}), (1, {"a": 2.0, "b": 3.0}), (2, {"a": 4.0, "b": 5.0})],
            2,
        ),
        # consecutive entries of one step merge, later keys win
        (
            [(1, ("a",), [1.0]), (1, ("b",), [2.0]), (1, ("a",), [9.0]), (2, ("a",), [3.0])],
            [(1, {"a": 9.0, "b": 2.0}), (2, {"a": 3.0})],
            2,
        ),
        # a step logged again later (not consecutively) stays a row of its own
        (
            [(5, ("a",), [1.0]), (3, ("a",), [2.0]), (5, ("a",), [3.0])],
            [(5, {"a": 1.0}), (3, {"a": 2.0}), (5, {"a": 3.0})],
            1,
        ),
    ],
)
def test_packed_batch_blocks_and_merges(
    entries: list[tuple[int, tuple[str, ...], list[float]]],
    expected: list[tuple[int, dict[str, float]]],
    blocks: int,
) -> None:
    batch = _packed.PackedBatch()
    for step, keys, values in entries:
        batch.add(step, float(step), keys, values)
    body = batch.encode("m")
    assert [(step, values) for step, _, values in _rows(body)] == expected
    assert len(_packed.decode(body)[1]) == blocks
    assert batch.points == sum(len(values) for _, values in expected)


@pytest.mark.parametrize("bad", [["x"], [None], [10**400]])
def test_packed_batch_refuses_a_non_number_and_keeps_what_it_had(bad: list[object]) -> None:
    batch = _packed.PackedBatch()
    batch.add(0, 0.0, ("a",), [1.0])
    with pytest.raises((struct.error, OverflowError)):
        batch.add(1, 1.0, ("a",), bad)  # type: ignore[arg-type]
    with pytest.raises((struct.error, OverflowError)):
        batch.add(0, 1.0, ("b",), bad)  # type: ignore[arg-type]  # the merge path
    assert batch.points == 1
    assert [(s, v) for s, _, v in _rows(batch.encode("k"))] == [(0, {"a": 1.0})]


def test_packed_steps_up_to_drops_later_steps() -> None:
    batch = _packed.PackedBatch()
    for step in range(6):
        batch.add(step, 0.0, ("a", "b") if step % 2 else ("a",), [1.0] * (1 + step % 2))
    body, points = _packed.steps_up_to(batch.encode("r"), 2)
    assert body is not None and points == 4
    assert [s for s, _, _ in _rows(body)] == [0, 1, 2]
    assert _packed.decode(body)[0] == "r"
    assert _packed.steps_up_to(batch.encode("r"), -1) == (None, 0)


def test_packed_to_json_body_is_the_same_batch_in_json() -> None:
    batch = _packed.PackedBatch()
    batch.add(3, 7.0, ("x", "y"), [0.5, math.nan])
    assert _wire.decode_batch(_packed.to_json_body(batch.encode("j"))) == {
        "batch_id": "j",
        "steps": [{"step": 3, "time": 7.0, "values": {"x": 0.5, "y": "NaN"}}],
    }


def _plain(step: int, keys: int = 20) -> tuple[int, float, dict]:
    return step, 1000.0 + step, {f"k{i}": step + i / 100 for i in range(keys)}


def _odd(step: int, values: dict) -> tuple[int, float, dict]:
    return step, 1000.0 + step, values


class _Defaulting(dict):  # a dict subclass that answers a missing key instead of raising
    def __missing__(self, key: str) -> float:
        return -1.0


_LONG = [_plain(s) for s in range(1, 700)]  # longer than a chunk the sender reads at once
DRAINS = {
    "plain": [[_plain(s) for s in range(30)], [_plain(s) for s in range(30, 2530)]],
    "plain from the first drain": [[_plain(s) for s in range(2530)]],
    "an int past float range": [[_plain(0)], [_plain(1), (2, 2.0, {"k0": 10**400}), _plain(3)]],
    "an int near the float range's end": [[_plain(0), _odd(1, {"k0": 15 * 10**307})]],
    "a step logged twice": [[_plain(0)], [_plain(1), _plain(1, keys=3), _plain(2)]],
    "a step going back": [[_plain(5)], [_plain(6), _plain(4), _plain(7)]],
    "new keys": [[_plain(0)], [_plain(1), _plain(2, keys=5), _plain(3)]],
    "not a number": [[_plain(0)], [_plain(1), (2, 2.0, {"k0": "x"}), _plain(3)]],
    "a bad step": [[_plain(0)], [_plain(1), (-2, 2.0, {"k0": 1.0})]],
    "the same keys in another order": [
        [_plain(0), _odd(1, dict(reversed(_plain(1)[2].items()))), _plain(2)]
    ],
    "as many keys but one other": [[_plain(0), _odd(1, {**_plain(1)[2], "k19x": 0.5}), _plain(2)]],
    "NaN and infinities": [[_plain(0), _odd(1, {"k0": math.nan, "k1": math.inf, "k2": -0.0})]],
    "numpy scalars": [
        [_plain(0), _odd(1, {"a": np.float32(0.1), "b": np.int64(7), "c": np.bool_(True)})]
    ],
    "numpy float64s, as verl logs them": [
        [_odd(s, {f"k{i}": np.float64(s + i / 100) for i in range(20)}) for s in range(300)]
    ],
    "torch scalars": [[_plain(0), _odd(1, {"a": torch.tensor(0.1), "b": torch.tensor(3)})]],
    "bools and ints": [[_odd(s, {"a": s % 2 == 0, "b": s, "c": 0.5}) for s in range(300)]],
    "one key": [[_odd(s, {"loss": s / 3}) for s in range(300)]],
    "an empty step": [[_plain(0), _odd(1, {}), _plain(2)]],
    "a dict subclass lacking a key": [
        [_plain(0), _odd(1, _Defaulting(_plain(1, keys=19)[2], x=1.0))]
    ],
    "one odd step in a long drain": [
        [_plain(0)],
        [*_LONG[:300], _odd(301, {"k0": "x"}), *_LONG[301:]],
    ],
    "steps repeating in a long drain": [[_plain(s // 2) for s in range(600)]],
}


def _batches(drains: list[list[tuple[int, float, dict]]], read_at_once: bool) -> list:
    """The batches a PointBatcher ships for ``drains`` (as rows, each value as its bits, so
    that NaN compares and -0.0 differs from 0.0), and its counters."""
    bodies: list[tuple[int, list]] = []
    counters = Counters()

    def deliver(_: str, points: int, body: bytes) -> None:
        rows = [(s, t, {k: _bits(v) for k, v in values.items()}) for s, t, values in _rows(body)]
        bodies.append((points, rows))

    batcher = PointBatcher(1000, counters, Warnings(), deliver)
    for drain in drains:
        if read_at_once:
            batcher.add_all(drain, {})
        else:
            for entry in drain:
                batcher.add(entry)
        batcher.ship()
    return [*bodies, (counters.skipped, counters.dropped_steps)]


def _bits(value: float) -> bytes:
    return struct.pack("<d", value)


def _stored(batches: list) -> dict[tuple[int, str], tuple[float, bytes]]:
    """What the service keeps of these batches: each (step, key)'s last time and value."""
    return {
        (step, key): (when, value)
        for _, rows in batches[:-1]
        for step, when, values in rows
        for key, value in values.items()
    }


def _careful(drains: list[list[tuple[int, float, dict]]]) -> dict[tuple[int, str], tuple]:
    """The same, read value by value by ``_wire.convert_values``, the careful path."""
    stored = {}
    for drain in drains:
        for raw_step, when, metrics in drain:
            step = _wire.to_step(raw_step)
            values = _wire.convert_values(metrics)[0] if step is not None else {}
            for key, value in values.items():
                stored[(step, key)] = (when, _bits(from_wire(value)))
    return stored


@pytest.mark.parametrize("drains", DRAINS.values(), ids=DRAINS.keys())
def test_a_drain_read_at_once_makes_the_batches_that_entry_by_entry_makes(
    drains: list[list[tuple[int, float, dict]]],
) -> None:
    at_once = _batches(drains, read_at_once=True)
    assert at_once == _batches(drains, read_at_once=False)
    assert _stored(at_once) == _careful(drains)
