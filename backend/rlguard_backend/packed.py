"""The packed points body (``Content-Type: application/x-rlguard-packed``): a batch's values as
raw little-endian float64 arrays, as the hook sends them (``rlguard._packed`` writes it)::

    b"RLGP" 0x01                      magic and version
    uint32                            length of the header
    header (UTF-8 JSON)               {"batch_id": "…", "blocks": [{"keys": [...], "rows": n}, …]}
    per block: rows × int64 steps, rows × float64 times (NaN: none), rows × len(keys) × float64
    values, row by row (NaN and ±Inf as themselves)

A block is a run of steps that log the same keys. ``parse_packed_batch`` checks every part and
gives the same ``BatchIn`` as the JSON body of those steps would. The content type, magic, header
length and step bound are ``rlguard.protocol``'s, which the hook writes to.
"""

from __future__ import annotations

import math
import sys
from array import array
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from rlguard.protocol import MAX_STEP, PACKED_CONTENT_TYPE, PACKED_HEADER_LENGTH, PACKED_MAGIC
from rlguard_backend import ingest
from rlguard_backend.core.errors import MalformedRequest
from rlguard_backend.schemas import BatchId, BatchIn, MetricName, StepIn

VALUE_BYTES = 8


class PackedBlock(BaseModel):
    model_config = ConfigDict(extra="forbid")

    keys: Annotated[list[MetricName], Field(min_length=1)]
    rows: Annotated[int, Field(ge=1)]


class PackedHeader(BaseModel):
    model_config = ConfigDict(extra="forbid")

    batch_id: BatchId
    blocks: list[PackedBlock]


def is_packed(content_type: str | None) -> bool:
    """Whether a request's ``Content-Type`` names the packed body."""
    return (content_type or "").split(";", 1)[0].strip().lower() == PACKED_CONTENT_TYPE


def parse_packed_batch(raw: bytes, max_points: int) -> BatchIn:
    """The batch a packed body holds: 400 when its framing is off, 422 naming a bad field."""
    if not raw.startswith(PACKED_MAGIC):
        raise MalformedRequest(
            f"a {PACKED_CONTENT_TYPE} body starts with {PACKED_MAGIC!r}; "
            "send the hook's packed body or JSON"
        )
    start = len(PACKED_MAGIC) + PACKED_HEADER_LENGTH.size
    if len(raw) < start:
        raise MalformedRequest("packed body ends inside its header length")
    (length,) = PACKED_HEADER_LENGTH.unpack_from(raw, len(PACKED_MAGIC))
    if len(raw) < start + length:
        raise MalformedRequest("packed body ends inside its header")
    header = ingest.parse_body(PackedHeader, raw[start : start + length], "batch_id and blocks")
    _check_keys_unique(header)
    ingest.check_point_count(sum(len(b.keys) * b.rows for b in header.blocks), max_points)
    expected = sum(b.rows * (2 + len(b.keys)) for b in header.blocks) * VALUE_BYTES
    payload = memoryview(raw)[start + length :]
    if len(payload) != expected:
        raise MalformedRequest(
            f"packed body holds {len(payload)} bytes of arrays where its header declares "
            f"{expected}; send the body as the hook wrote it"
        )
    steps: list[StepIn] = []
    offset = 0
    for number, block in enumerate(header.blocks):
        width = len(block.keys)
        block_steps = _column("q", payload, offset, block.rows)
        times = _column("d", payload, offset + block.rows * VALUE_BYTES, block.rows)
        values = _column("d", payload, offset + 2 * block.rows * VALUE_BYTES, block.rows * width)
        offset += block.rows * (2 + width) * VALUE_BYTES
        for row, step in enumerate(block_steps):
            if not 0 <= step <= MAX_STEP:
                raise ingest.InvalidBatch([_step_error(number, row, step)])
            when = times[row]
            row_values = values[row * width : (row + 1) * width]
            steps.append(
                StepIn.model_construct(
                    step=step,
                    time=when if math.isfinite(when) else None,
                    values=dict(zip(block.keys, row_values, strict=True)),
                )
            )
    return BatchIn.model_construct(batch_id=header.batch_id, steps=steps)


def _column(typecode: str, payload: memoryview, offset: int, count: int) -> array:
    column = array(typecode)
    column.frombytes(payload[offset : offset + count * VALUE_BYTES])
    if sys.byteorder == "big":
        column.byteswap()
    return column


def _check_keys_unique(header: PackedHeader) -> None:
    for number, block in enumerate(header.blocks):
        if len(set(block.keys)) != len(block.keys):
            raise ingest.InvalidBatch(
                [
                    {
                        "type": "value_error",
                        "loc": ["blocks", number, "keys"],
                        "msg": "a block names each key once",
                    }
                ]
            )


def _step_error(block: int, row: int, step: int) -> dict[str, object]:
    return {
        "type": "value_error",
        "loc": ["blocks", block, "steps", row],
        "msg": f"step {step} is outside 0..2^62",
    }
