"""The runs list's ``sort``, ``filter`` and ``fields`` parameters as regular expressions.

The OpenAPI document states them as JSON Schema ``pattern``s, so a client (or a fuzzer) knows
exactly which values the service takes; ``api/runs.py`` refuses a value outside them after
``run_fields`` has checked it field by field (whose refusals name the fix). Each pattern is
narrower than Python's own parsing where that is loose:

- a number has at most 20 digits each side of its point and an exponent of at most 99 (so it
  is finite), with only ASCII spaces around it;
- a date is ``YYYY-MM-DD[(T| )HH:MM[:SS[.ffffff]]][Z|±HH:MM]``, with only ASCII spaces around;
- a config or summary key in a filter has no ``:``.

A date is one the calendar has (not 2026-02-30, 2100-02-29 or 2026-04-31).

>>> import re
>>> bool(re.search(SORT, "-last.reward_mean,config.lr")), bool(re.search(SORT, "-lr"))
(True, False)
>>> bool(re.search(FILTER, "config.lr:gt:1e-4")), bool(re.search(FILTER, "name:gt:1"))
(True, False)
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rlguard.protocol import MAX_KEY_CHARS
from rlguard_backend.store.run_fields import (
    DATE_COLUMNS,
    HPARAMS,
    MAX_FIELDS,
    MAX_SORT_KEYS,
    NUMBER_OPS,
    SEVERITIES,
    SIGNAL_NAMES,
    TEXT_COLUMNS,
    TEXT_OPS,
)


def _either(names: Iterable[str]) -> str:
    return "(?:" + "|".join(re.escape(name) for name in sorted(names)) + ")"


_NUMBER_FIELDS = (
    f"(?:last_step|last\\.{_either(SIGNAL_NAMES)}|alerts\\.{_either(('open', *SEVERITIES))})"
)
_TEXT_FIELDS = _either(TEXT_COLUMNS)
_DATE_FIELDS = _either(DATE_COLUMNS)
# A key ends where the part ends: not in whitespace (a part is stripped), at most MAX_KEY_CHARS.
_LISTED_KEY = f'[^,"\\x00]{{0,{MAX_KEY_CHARS - 1}}}[^,"\\x00\\s]'
_LISTED = (
    f"(?:{_TEXT_FIELDS}|{_DATE_FIELDS}|{_NUMBER_FIELDS}|health"
    f"|hparam\\.{_either(HPARAMS)}|(?:config|summary)\\.{_LISTED_KEY})"
)


def _listing(each: str, most: int) -> str:
    """Comma-separated parts, empty ones allowed, at most ``most`` of them not empty."""
    return f"^[\\s,]*(?:{each}(?:\\s*,[\\s,]*{each}){{0,{most - 1}}})?[\\s,]*$"


SORT = _listing(f"-?{_LISTED}", MAX_SORT_KEYS)
FIELDS = _listing(_LISTED, MAX_FIELDS)

_NUMBER = (
    " *[+-]?(?:[0-9]{1,20}(?:\\.[0-9]{0,20})?|\\.[0-9]{1,20})"
    "(?:[eE](?:-[0-9]{1,3}|\\+?[0-9]{1,2}))? *"
)
# A day the calendar has: 31-day months, 30-day months, February to the 28th, and the 29th in
# leap years (divisible by 4 but not by 100, or by 400).
_DAY = (
    "(?:[1-9][0-9]{3}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    "|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))"
    "|(?:[1-9][0-9](?:0[48]|[2468][048]|[13579][26])|(?:[2468][048]|[13579][26])00)-02-29)"
)
_DATE = (
    f" *{_DAY}"
    "(?:[T ](?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9](?:\\.[0-9]{1,6})?)?"
    "(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])?)? *"
)
_ANY = "[\\s\\S]*"
_BLANK = f"(?:blank|notblank)(?::{_ANY})?"
_ORDERED = _either(("eq", "ne", *NUMBER_OPS))
_TEXTUAL = _either(("eq", "ne", *TEXT_OPS))
_FILTER_KEY = f'[^":\\x00]{{1,{MAX_KEY_CHARS}}}'
_JSON_FIELDS = f"(?:(?:config|summary)\\.{_FILTER_KEY}|hparam\\.{_either(HPARAMS)}|health)"
FILTER = (
    "^(?:"
    f"{_TEXT_FIELDS}:(?:{_TEXTUAL}:{_ANY}|{_BLANK})"
    f"|{_NUMBER_FIELDS}:(?:{_ORDERED}:{_NUMBER}|{_BLANK})"
    f"|{_DATE_FIELDS}:(?:{_ORDERED}:{_DATE}|{_BLANK})"
    f"|{_JSON_FIELDS}:(?:{_TEXTUAL}:{_ANY}|{_either(NUMBER_OPS)}:{_NUMBER}|{_BLANK})"
    ")$"
)

# A grouping field, as ``GET /groups`` reads ``by``: parts are not stripped, a key is any
# characters but ``,``, ``"`` and NUL (``run_fields.check_field``'s rules, no narrower).
_GROUP_KEY = f'[^,"\\x00]{{1,{MAX_KEY_CHARS}}}'
_GROUPING = (
    f"(?:{_TEXT_FIELDS}|{_DATE_FIELDS}|{_NUMBER_FIELDS}|health"
    f"|hparam\\.{_either(HPARAMS)}|(?:config|summary)\\.{_GROUP_KEY})"
)


def group_by(most: int) -> str:
    """``by``: at most ``most`` grouping fields, comma-separated, empty parts allowed."""
    return f"^,*(?:{_GROUPING}(?:,+{_GROUPING}){{0,{most - 1}}})?,*$"
