"""Logged values as wire numbers, and the JSON batch; mirrors ``rlguard_backend.schemas.BatchIn``.

Values arrive as whatever the trainer logged (Python numbers, bools, numpy scalars, 0-d torch
tensors) and leave as JSON numbers, with NaN and ±Inf as their strings (``rlguard.protocol``: the
wire's limits and codec, which the service imports too). Tensors are read with one
``stack(...).tolist()`` per device, so a log() call costs at most one synchronisation per device
however many tensors it holds.
"""

from __future__ import annotations

import gzip
import json
import operator
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rlguard.protocol import MAX_KEY_CHARS, MAX_STEP, to_wire

_PLAIN_TYPES = (float, int, bool)


def _is_tensor(value: object) -> bool:
    torch = sys.modules.get("torch")  # no torch imported: no tensor can exist
    return torch is not None and isinstance(value, torch.Tensor)


def _tensors_to_floats(tensors: dict[str, Any]) -> dict[str, object]:
    """Read many 0-d tensors with one transfer per device."""
    by_device: dict[Any, list[str]] = {}
    for key, tensor in tensors.items():
        by_device.setdefault(tensor.device, []).append(key)
    out: dict[str, object] = {}
    torch = sys.modules["torch"]
    for keys in by_device.values():
        try:
            stacked = torch.stack([tensors[k].detach().reshape(()).double() for k in keys])
            out.update(zip(keys, stacked.cpu().tolist(), strict=True))
        except RuntimeError:  # not 0-d (numel > 1) or not numeric: report the keys one by one
            for key in keys:
                out[key] = tensors[key]
    return out


def to_float(value: object) -> float | None:
    """The float a plain or numpy scalar stands for, or None when it is not a number."""
    if isinstance(value, (float, bool)):  # numpy.float64 is a float subclass
        return float(value)
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:  # beyond the float range, as the packed path finds it
            return None
    item = getattr(value, "item", None)
    shape = getattr(value, "shape", None)
    if callable(item) and shape in ((), None) and type(value).__module__ == "numpy":
        result = item()
        if isinstance(result, _PLAIN_TYPES):
            return to_float(result)
    return None


def convert_values(metrics: Mapping[Any, Any]) -> tuple[dict[str, float | str], list[str]]:
    """Wire values of one logged dict, and the keys skipped as non-numeric or invalid."""
    values: dict[str, float | str] = {}
    skipped: list[str] = []
    tensors: dict[str, Any] = {}
    for key, value in metrics.items():
        if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY_CHARS:
            skipped.append(repr(key))
        elif type(value) in _PLAIN_TYPES and abs(value) < 1e308:
            values[key] = to_wire(float(value))
        elif type(value) is float:  # ±Inf and NaN
            values[key] = to_wire(value)
        elif _is_tensor(value):
            tensors[key] = value
        else:
            number = to_float(value)
            if number is None:
                skipped.append(key)
            else:
                values[key] = to_wire(number)
    if tensors:
        for key, value in _tensors_to_floats(tensors).items():
            if isinstance(value, float):
                values[key] = to_wire(value)
            else:
                skipped.append(key)
    return values, skipped


def to_step(value: object) -> int | None:
    """A valid step number from an int-like value, or None."""
    try:
        step = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        if isinstance(value, float) and value.is_integer():
            step = int(value)
        else:
            return None
    return step if 0 <= step <= MAX_STEP else None


def encode_batch(batch_id: str, steps: list[dict]) -> bytes:
    """The gzip-compressed JSON body of ``POST /runs/{id}/batches`` (the hook sends packed
    bodies, ``_packed``; JSON is for services older than those, and spools older than them)."""
    body = json.dumps(
        {"batch_id": batch_id, "steps": steps}, allow_nan=False, separators=(",", ":")
    )
    return gzip.compress(body.encode(), compresslevel=5)


def decode_batch(body: bytes) -> dict:
    """Inverse of ``encode_batch``."""
    return json.loads(gzip.decompress(body))


def steps_up_to(body: bytes, last_step: int) -> tuple[bytes | None, int]:
    """A JSON batch body without its steps after ``last_step``, and its points (None: none)."""
    return items_up_to(body, last_step, "steps", decode_batch, encode_batch, count_points)


def items_up_to(
    body: bytes,
    last_step: int,
    field: str,
    decode: Callable[[bytes], dict],
    encode: Callable[[str, list[dict]], bytes],
    count: Callable[[list[dict]], int] = len,
) -> tuple[bytes | None, int]:
    """A JSON body (points or samples) without its ``field`` items after ``last_step``, and
    how many it keeps (None: none)."""
    batch = decode(body)
    kept = [item for item in batch[field] if item["step"] <= last_step]
    if not kept:
        return None, 0
    return encode(batch["batch_id"], kept), count(kept)


def count_points(steps: Iterable[Mapping[str, Any]]) -> int:
    """Points (key/value pairs) in a list of step objects."""
    return sum(len(step["values"]) for step in steps)
