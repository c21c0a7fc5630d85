"""The packed points body: a batch's floats as raw float64 arrays, not as JSON text.

Writing a float as JSON text costs ~0.3 µs (its shortest ``repr``), more than everything else the
hook does for it; packing it costs a copy. A packed body (``Content-Type: application/
x-rlguard-packed``, no gzip: float64 noise does not compress) is::

    b"RLGP" 0x01                      magic and version
    uint32 little-endian              length of the header
    header (UTF-8 JSON)               {"batch_id": "…", "blocks": [{"keys": [...], "rows": n}, …]}
    per block, in order:
      rows × int64                    steps
      rows × float64                  times (Unix seconds; NaN: not known)
      rows × len(keys) × float64      values, row by row (NaN and ±Inf as themselves)

all little-endian. A block is a run of consecutive steps that log the same keys in the same
order, so a batch of one trainer's steps is usually one block. The magic, content type and
header length are ``rlguard.protocol``'s. Mirrors ``rlguard_backend.packed``, which turns it
into the same ``BatchIn`` a JSON body gives.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Iterator
from itertools import starmap

from rlguard import _wire
from rlguard.protocol import PACKED_HEADER_LENGTH, PACKED_MAGIC, to_wire


class Block:
    """Consecutive steps that log the same keys: their steps and times as arrays, each step's
    values packed as it is added."""

    __slots__ = ("keys", "row", "rows", "steps", "times")

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys
        self.row = struct.Struct(f"<{len(keys)}d")
        self.steps: list[int] = []
        self.times: list[float] = []
        self.rows: list[bytes] = []

    def __repr__(self) -> str:
        return f"Block(keys={len(self.keys)}, rows={len(self.steps)})"

    def add(self, step: int, when: float, values: Iterable[float]) -> None:
        """Append one step; its values must be numbers (else struct.error or OverflowError,
        and nothing is appended)."""
        self.rows.append(self.row.pack(*values))
        self.steps.append(step)
        self.times.append(when)

    def pop(self) -> tuple[int, float, dict[str, float]]:
        """Remove the last step and return it."""
        values = self.row.unpack(self.rows.pop())
        return self.steps.pop(), self.times.pop(), dict(zip(self.keys, values, strict=True))

    def rows_as_dicts(self) -> Iterator[tuple[int, float, dict[str, float]]]:
        """Each step as ``(step, time, {key: value})``."""
        for step, when, row in zip(self.steps, self.times, self.rows, strict=True):
            yield step, when, dict(zip(self.keys, self.row.unpack(row), strict=True))


class PackedBatch:
    """A batch of points being built, step after step; consecutive entries of one step are
    merged (later keys win), as the JSON encoding did."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.points = 0
        self.last_step = -1

    def __repr__(self) -> str:
        return f"PackedBatch(blocks={len(self.blocks)}, points={self.points})"

    def add(self, step: int, when: float, keys: tuple[str, ...], values: Iterable[float]) -> None:
        """Append one step of plain numbers, one per key (else struct.error or OverflowError,
        and nothing is appended)."""
        if step == self.last_step:
            self._merge_last(when, keys, values)
            return
        block = self.blocks[-1] if self.blocks else None
        if block is None or block.keys != keys:
            block = Block(keys)
            block.add(step, when, values)  # raises before the block is kept
            self.blocks.append(block)
        else:
            block.add(step, when, values)
        self.points += len(keys)
        self.last_step = step

    def add_rows(
        self,
        keys: tuple[str, ...],
        steps: list[int],
        times: list[float],
        rows: list[tuple[float, ...]],
    ) -> None:
        """Append steps that log ``keys``, rising after the batch's last step, with each
        step's values in the order of ``keys`` (else struct.error or OverflowError, and
        nothing is appended)."""
        last = self.blocks[-1] if self.blocks else None
        block = last if last is not None and last.keys == keys else Block(keys)
        block.rows += list(starmap(block.row.pack, rows))
        block.steps += steps
        block.times += times
        if block is not last:
            self.blocks.append(block)
        self.points += len(steps) * len(keys)
        self.last_step = steps[-1]

    def _merge_last(self, when: float, keys: tuple[str, ...], values: Iterable[float]) -> None:
        incoming = Block(keys)
        incoming.add(self.last_step, when, values)  # raises before anything changes
        block = self.blocks[-1]
        step, _, merged = block.pop()
        merged.update(incoming.pop()[2])
        self.points -= len(block.keys)
        if not block.steps:
            self.blocks.pop()
        self.last_step = self.blocks[-1].steps[-1] if self.blocks else -1
        self.add(step, when, tuple(merged), merged.values())

    def encode(self, batch_id: str) -> bytes:
        """The body of ``POST /runs/{id}/batches``."""
        header = {
            "batch_id": batch_id,
            "blocks": [{"keys": list(b.keys), "rows": len(b.steps)} for b in self.blocks],
        }
        text = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode()
        parts = [PACKED_MAGIC, PACKED_HEADER_LENGTH.pack(len(text)), text]
        for block in self.blocks:
            parts += [_column("q", block.steps), _column("d", block.times), *block.rows]
        return b"".join(parts)


def _column(code: str, column: list[int] | list[float]) -> bytes:
    return struct.pack(f"<{len(column)}{code}", *column)


def is_packed(body: bytes) -> bool:
    """True for a packed points body (its magic), False for JSON or gzip JSON."""
    return body.startswith(PACKED_MAGIC)


def decode(body: bytes) -> tuple[str, list[Block]]:
    """The batch id and blocks of a packed body (the hook's own, from its spool)."""
    (length,) = PACKED_HEADER_LENGTH.unpack_from(body, len(PACKED_MAGIC))
    offset = len(PACKED_MAGIC) + PACKED_HEADER_LENGTH.size
    header = json.loads(body[offset : offset + length])
    offset += length
    blocks = []
    for described in header["blocks"]:
        block = Block(tuple(described["keys"]))
        rows = described["rows"]
        block.steps = list(struct.unpack_from(f"<{rows}q", body, offset))
        block.times = list(struct.unpack_from(f"<{rows}d", body, offset + 8 * rows))
        offset += 16 * rows
        size = block.row.size
        block.rows = [body[offset + i * size : offset + (i + 1) * size] for i in range(rows)]
        offset += rows * size
        blocks.append(block)
    return header["batch_id"], blocks


def steps_up_to(body: bytes, last_step: int) -> tuple[bytes | None, int]:
    """A packed body without its steps after ``last_step``, and its points (None: none left)."""
    batch_id, blocks = decode(body)
    kept = PackedBatch()
    for block in blocks:
        for step, when, values in block.rows_as_dicts():
            if step <= last_step:
                kept.add(step, when, tuple(values), values.values())
    if not kept.points:
        return None, 0
    return kept.encode(batch_id), kept.points


def to_json_body(body: bytes) -> bytes:
    """The same batch as the gzip JSON body, for a service older than the packed body."""
    batch_id, blocks = decode(body)
    steps = [
        {
            "step": step,
            "time": when if math.isfinite(when) else None,
            "values": {key: to_wire(value) for key, value in values.items()},
        }
        for block in blocks
        for step, when, values in block.rows_as_dicts()
    ]
    return _wire.encode_batch(batch_id, steps)
