"""The wire contract between the hook and the service, written down once.

The limits both sides check (steps, metric keys, run ids), the packed points body's framing and
the strings that carry NaN and ±Inf in JSON. The hook imports it at ``import rlguard``, so it
uses the standard library only; the service (``rlguard_backend.schemas``, ``.packed`` and the
modules that answer with wire numbers) imports it too, and ``tests/test_protocol.py`` holds the
service's schemas to it.
"""

from __future__ import annotations

import math
import re
import struct
import urllib.parse

__all__ = [
    "MAX_KEY_CHARS",
    "MAX_STEP",
    "NON_FINITE",
    "PACKED_CONTENT_TYPE",
    "PACKED_HEADER_LENGTH",
    "PACKED_MAGIC",
    "RUN_ID",
    "RUN_ID_PATTERN",
    "RUN_PAGE_MARGIN_STEPS",
    "from_wire",
    "run_page_url",
    "to_wire",
]

MAX_STEP = 2**62
"""The largest step: steps are 64-bit integers, with headroom, and exact as a float too."""

MAX_KEY_CHARS = 256
"""The longest metric key, in characters; a key has at least one."""

RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,127}$"
"""A run id: 1-128 letters, digits and ``._:@+-``, starting with a letter or digit."""

RUN_ID = re.compile(RUN_ID_PATTERN)
"""``RUN_ID_PATTERN`` compiled; use ``fullmatch`` (Python's ``$`` also matches before a final
newline, the service's does not)."""

PACKED_CONTENT_TYPE = "application/x-rlguard-packed"
"""The ``Content-Type`` of the packed points body (``rlguard._packed``)."""

PACKED_MAGIC = b"RLGP\x01"
"""The first bytes of a packed points body: ``RLGP`` and the format's version."""

PACKED_HEADER_LENGTH = struct.Struct("<I")
"""The packed body's length of its JSON header, after the magic: a little-endian uint32."""

NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
"""The strings that carry non-finite numbers in JSON, which has no literal for them."""


def to_wire(value: float | None) -> float | str:
    """A number as JSON carries it: NaN and ±Inf as their strings, None (a stored NaN) as NaN."""
    if value is None:
        return "NaN"
    if math.isfinite(value):
        return value
    if value != value:
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def from_wire(value: float | str | None) -> float:
    """Inverse of ``to_wire``; None (JSON null, verl's NaN) is NaN; another string: ValueError."""
    if isinstance(value, str):
        try:
            return NON_FINITE[value]
        except KeyError:
            raise ValueError(f"not a wire number: {value[:80]!r}") from None
    if value is None:
        return math.nan
    return float(value)


# A link to steps opens the run page zoomed on them, this many steps either side.
RUN_PAGE_MARGIN_STEPS = 50


def run_page_url(
    base_url: str, run_id: str, first_step: int | None = None, last_step: int | None = None
) -> str:
    """The dashboard's page of a run (``rlguard up`` serves it at ``/runs/<id>``), zoomed on
    ``first_step``..``last_step`` with a margin when they are given.

    >>> run_page_url("https://rl.example.com/", "grpo 7")
    'https://rl.example.com/runs/grpo%207'
    >>> run_page_url("https://rl.example.com", "grpo-7", 120, 130)
    'https://rl.example.com/runs/grpo-7?from=70&to=180'
    """
    page = f"{base_url.rstrip('/')}/runs/{urllib.parse.quote(run_id, safe='')}"
    if first_step is None:
        return page
    last = first_step if last_step is None else last_step
    low, high = max(0, first_step - RUN_PAGE_MARGIN_STEPS), last + RUN_PAGE_MARGIN_STEPS
    return f"{page}?from={low}&to={high}"
