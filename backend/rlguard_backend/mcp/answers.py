"""The shape of every tool's answer: compact JSON a model reads in one go.

Numbers keep ``SIGNIFICANT_DIGITS`` significant digits, text is cut to ``MAX_TEXT_CHARS`` and
lists to ``MAX_ITEMS``; when the answer is still longer than ``MAX_ANSWER_CHARS`` the limits
halve until it fits, and every cut says what it left out.

>>> compact({"kl": 0.123456789, "steps": [1, 2, 3]})
'{"kl":0.1235,"steps":[1,2,3]}'
"""

from __future__ import annotations

import json
import math
from typing import Any

SIGNIFICANT_DIGITS = 4
MAX_TEXT_CHARS = 400
MAX_ITEMS = 60
MAX_ANSWER_CHARS = 8000
MIN_TEXT_CHARS = 40
MIN_ITEMS = 4


def round_number(value: float) -> float | int | str:
    """``value`` to SIGNIFICANT_DIGITS significant digits; non-finite values as their name."""
    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if value == 0 or (abs(value) < 1e15 and value == int(value)):
        return int(value)
    return float(f"{value:.{SIGNIFICANT_DIGITS}g}")


def shrink(value: Any, max_text: int, max_items: int) -> Any:
    """``value`` with floats rounded, strings cut to ``max_text``, lists to ``max_items``."""
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return round_number(value)
    if isinstance(value, str):
        if len(value) <= max_text:
            return value
        return f"{value[:max_text]}…(+{len(value) - max_text} chars)"
    if isinstance(value, dict):
        return {str(k): shrink(v, max_text, max_items) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [shrink(v, max_text, max_items) for v in value[:max_items]]
        if len(value) > max_items:
            items.append(f"…(+{len(value) - max_items} more)")
        return items
    return shrink(str(value), max_text, max_items)


def compact(value: Any, max_chars: int = MAX_ANSWER_CHARS) -> str:
    """``value`` as compact JSON of at most ``max_chars`` characters (see the module doc)."""
    max_text, max_items = MAX_TEXT_CHARS, MAX_ITEMS
    while True:
        text = _dumps(shrink(value, max_text, max_items))
        if len(text) <= max_chars:
            return text
        if max_text <= MIN_TEXT_CHARS and max_items <= MIN_ITEMS:
            return _dumps({"truncated": True, "answer": text[: (max_chars - 40) // 2]})
        max_text, max_items = max(max_text // 2, MIN_TEXT_CHARS), max(max_items // 2, MIN_ITEMS)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
