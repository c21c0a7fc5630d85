"""Logged values as wire numbers (non-finite values, numpy scalars, tensors); the JSON batch."""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import pytest
import torch

from rlguard import _wire


@pytest.mark.parametrize(
    ("value", "wire"),
    [
        (0.5, 0.5),
        (3, 3.0),
        (True, 1.0),
        (math.nan, "NaN"),
        (math.inf, "Infinity"),
        (-math.inf, "-Infinity"),
        (np.float32(0.25), 0.25),
        (np.float64("nan"), "NaN"),
        (np.int64(7), 7.0),
        (np.bool_(False), 0.0),
        (np.array(2.5), 2.5),
        (torch.tensor(1.5), 1.5),
        (torch.tensor(float("-inf")), "-Infinity"),
        (torch.tensor(3, dtype=torch.int64), 3.0),
        (torch.tensor(0.5, dtype=torch.bfloat16), 0.5),
        (torch.tensor([2.0]), 2.0),
    ],
)
def test_wire_convert_values_accepts_numbers(value: object, wire: object) -> None:
    values, skipped = _wire.convert_values({"k": value})
    assert (values, skipped) == ({"k": wire}, [])


@pytest.mark.parametrize(
    "value", ["0.5", None, [1.0], {"a": 1}, np.array([1.0, 2.0]), torch.ones(3), 10**400]
)
def test_wire_convert_values_skips_non_numbers(value: object) -> None:
    assert _wire.convert_values({"k": value, "ok": 1.0}) == ({"ok": 1.0}, ["k"])


def test_wire_convert_values_skips_bad_keys() -> None:
    values, skipped = _wire.convert_values({1: 1.0, "": 2.0, "x" * 257: 3.0, "good": 4.0})
    assert values == {"good": 4.0}
    assert len(skipped) == 3


class CountingTensor(torch.Tensor):
    """Counts the torch functions called on tensors of this class: stack, tolist, item …"""

    calls: ClassVar[list[str]] = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # type: ignore[override]
        cls.calls.append(getattr(func, "__name__", str(func)))
        return super().__torch_function__(func, types, args, kwargs or {})


def test_wire_tensors_are_read_with_one_transfer_per_call() -> None:
    metrics = {f"t{i}": torch.tensor(float(i)).as_subclass(CountingTensor) for i in range(20)}
    CountingTensor.calls.clear()
    values, skipped = _wire.convert_values(metrics)
    assert values == {f"t{i}": float(i) for i in range(20)} and skipped == []
    reads = [c for c in CountingTensor.calls if c in ("item", "tolist", "__float__", "cpu")]
    assert reads.count("tolist") == 1
    assert "item" not in reads and "__float__" not in reads


@pytest.mark.parametrize(
    ("raw", "step"),
    [
        (0, 0),
        (12, 12),
        (np.int64(5), 5),
        (torch.tensor(4), 4),
        (7.0, 7),
        (-1, None),
        (1.5, None),
        ("3", None),
        (None, None),
        (2**63, None),
    ],
)
def test_wire_to_step(raw: object, step: int | None) -> None:
    assert _wire.to_step(raw) == step


def test_wire_encode_batch_round_trips_non_finite_values() -> None:
    steps = [{"step": 1, "time": 1.0, "values": {"x": "NaN", "y": "Infinity", "z": 0.5}}]
    assert _wire.decode_batch(_wire.encode_batch("b1", steps)) == {"batch_id": "b1", "steps": steps}


def test_wire_steps_up_to_keeps_an_old_spooled_json_batch_up_to_a_step() -> None:
    steps = [{"step": s, "time": 1.0, "values": {"a": 1.0, "b": 2.0}} for s in range(5)]
    body, points = _wire.steps_up_to(_wire.encode_batch("old", steps), 2)
    assert body is not None and points == 6
    assert _wire.decode_batch(body) == {"batch_id": "old", "steps": steps[:3]}
    assert _wire.steps_up_to(_wire.encode_batch("old", steps), -1) == (None, 0)
