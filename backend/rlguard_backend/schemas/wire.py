"""The wire's building blocks: identifiers, steps, numbers (non-finite ones as strings), and
the validators every model shares.

Non-finite numbers travel as the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` in both
directions, because JSON has no literal for them. Those strings, the step bound, the key length
and the run id pattern are ``rlguard.protocol``'s, the contract the hook writes to.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    StringConstraints,
    ValidationInfo,
    WithJsonSchema,
)

from rlguard.protocol import MAX_KEY_CHARS, MAX_STEP, NON_FINITE, RUN_ID_PATTERN, to_wire

RunStatus = Literal["running", "finished", "stopped", "crashed", "failed"]


RUN_STATUSES: tuple[str, ...] = ("running", "finished", "stopped", "crashed", "failed")


Severity = Literal["info", "warn", "critical"]


AlertStatus = Literal["open", "resolved"]


MAX_JSON_DEPTH = 32  # nesting of a run's config and summary


MAX_SAMPLE_TEXT_CHARS = 1024 * 1024  # each text of a sample (the hook sends 32 KiB at most)


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain the NUL character (U+0000); PostgreSQL cannot store it")
    return value


_NON_FINITE_NAMES = ", ".join(f'"{name}"' for name in NON_FINITE)


def _wire_number(value: Any, info: ValidationInfo) -> Any:
    """A JSON number, or one of the strings "NaN", "Infinity", "-Infinity". Refused: true and
    false, any other string, and in a JSON body a number too large for a 64-bit float (it
    parses as infinity; an infinite value travels as the string). Python floats validated in
    process may be non-finite."""
    kind = type(value)
    if kind is float:
        if value - value == 0.0 or info.mode == "python":
            return value
        raise ValueError(
            'number out of the range of a 64-bit float; send the string "Infinity" or '
            '"-Infinity" for an infinite value'
        )
    if kind is int:
        return value
    if kind is str and value in NON_FINITE:
        return NON_FINITE[value]
    raise ValueError(f"expected a number, or one of the strings {_NON_FINITE_NAMES}")


WIRE_NUMBER_SCHEMA = {"anyOf": [{"type": "number"}, {"enum": list(NON_FINITE)}]}


def integral(value: Any) -> Any:
    """A JSON integer may be written 163.0 (JSON Schema counts it as one); bools and strings
    stay refused by the strict check after this."""
    if type(value) is float and value.is_integer():
        return int(value)
    return value


# The AfterValidator words the refusal; the pattern tells schema readers (and fuzzers).
NoNul = Field(json_schema_extra={"pattern": "^[^\\x00]*$"})


NUL_FREE = AfterValidator(_no_nul)


RunId = Annotated[str, StringConstraints(pattern=RUN_ID_PATTERN)]


Project = Annotated[
    str,
    StringConstraints(min_length=1, max_length=128, strip_whitespace=True),
    NoNul,
    NUL_FREE,
]


Tag = Annotated[str, StringConstraints(min_length=1, max_length=128), NoNul, NUL_FREE]


MetricName = Annotated[str, StringConstraints(min_length=1, max_length=MAX_KEY_CHARS), NUL_FREE]


BatchId = Annotated[str, StringConstraints(min_length=1, max_length=64), NoNul, NUL_FREE]


RunName = Annotated[str, StringConstraints(max_length=256), NoNul, NUL_FREE]


Step = Annotated[int, Field(ge=0, le=MAX_STEP)]  # in a query string


# In a JSON body a step is a JSON integer (163.0 too): no bool (false would be a rewind to
# step 0), no fraction, no string.
BodyStep = Annotated[int, Field(ge=0, le=MAX_STEP, strict=True), BeforeValidator(integral)]


PointValue = Annotated[float, BeforeValidator(_wire_number), WithJsonSchema(WIRE_NUMBER_SCHEMA)]


WallTime = Annotated[float, Field(allow_inf_nan=False, strict=True)]


StrictBool = Annotated[bool, Field(strict=True)]


METRIC_NAME_SCHEMA = {"minLength": 1, "maxLength": MAX_KEY_CHARS, "pattern": "^[^\\x00]*$"}


def _numbers_by_name(number: dict[str, Any], most: int | None = None) -> WithJsonSchema:
    """The schema of a dict of metric name -> number (pydantic would put the names'
    pattern in patternProperties)."""
    schema = {"type": "object", "propertyNames": METRIC_NAME_SCHEMA, "additionalProperties": number}
    return WithJsonSchema(schema if most is None else {**schema, "maxProperties": most})


PointValues = Annotated[dict[MetricName, PointValue], _numbers_by_name(WIRE_NUMBER_SCHEMA)]


WireFloat = float | str


def nonfinite_as_wire(value: Any) -> Any:
    """Non-finite floats inside free-form JSON (config, summary) as their wire strings.

    Python's JSON parser accepts NaN and Infinity literals, but PostgreSQL's JSON does not, and
    SQLite would turn them into null: keep them as the strings the wire format uses instead.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return to_wire(value)
    if isinstance(value, dict):
        return {key: nonfinite_as_wire(item) for key, item in value.items()}
    if isinstance(value, list):
        return [nonfinite_as_wire(item) for item in value]
    return value


def _shallow(value: dict[str, Any]) -> dict[str, Any]:
    """Refuse JSON nested deeper than MAX_JSON_DEPTH (checked without recursion)."""
    level: list[Any] = [value]
    for _ in range(MAX_JSON_DEPTH):
        level = [
            child
            for item in level
            for child in (item.values() if isinstance(item, dict) else item)
            if isinstance(child, (dict, list))
        ]
        if not level:
            return value
    raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels; flatten it")


FreeJson = Annotated[dict[str, Any], AfterValidator(_shallow), AfterValidator(nonfinite_as_wire)]
