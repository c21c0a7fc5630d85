"""Numbers as little-endian machine values: stored chunks and the detectors' packed windows."""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable

_SWAP = sys.byteorder != "little"  # little-endian on every machine


def pack(code: str, numbers: Iterable[float] | Iterable[int]) -> bytes:
    """`numbers` as the bytes of ``array(code)`` ("d": float64, "q": int64), little-endian."""
    packed = array(code, numbers)
    if _SWAP:
        packed.byteswap()
    return packed.tobytes()


def unpack(code: str, blob: bytes) -> array:
    """Inverse of pack."""
    unpacked = array(code)
    unpacked.frombytes(blob)
    if _SWAP:
        unpacked.byteswap()
    return unpacked
