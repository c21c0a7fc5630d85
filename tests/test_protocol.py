"""``rlguard.protocol``, the one wire contract: the service's schemas and packed parser refuse
exactly what it says, the hook checks the same limits, and NaN and ±Inf cross both ways."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from pydantic import TypeAdapter, ValidationError

import rlguard
from rlguard import _packed, _wire
from rlguard._config import load_config
from rlguard.protocol import (
    MAX_KEY_CHARS,
    MAX_STEP,
    NON_FINITE,
    PACKED_CONTENT_TYPE,
    PACKED_HEADER_LENGTH,
    PACKED_MAGIC,
    RUN_ID,
    from_wire,
    to_wire,
)
from rlguard_backend import ingest, packed
from rlguard_backend.schemas import (
    WIRE_NUMBER_SCHEMA,
    BatchIn,
    RunCreate,
    RunId,
    SeriesData,
    Step,
)
from tests.hook.hookutil import child_env


def _batch(step: object = 1, key: str = "loss", value: object = 0.5) -> str:
    return json.dumps({"batch_id": "b", "steps": [{"step": step, "values": {key: value}}]})


def _accepted(body: str) -> bool:
    try:
        BatchIn.model_validate_json(body)
    except ValidationError:
        return False
    return True


def _packed_accepted(step: int, key: str = "loss") -> bool:
    batch = _packed.PackedBatch()
    batch.add(step, 1.0, (key,), [0.5])
    try:
        packed.parse_packed_batch(batch.encode("b"), max_points=10)
    except ingest.InvalidBatch:
        return False
    return True


@pytest.mark.parametrize(
    ("step", "ok"), [(0, True), (MAX_STEP, True), (MAX_STEP + 1, False), (-1, False)]
)
def test_protocol_step_bound_is_the_services_and_the_hooks(step: int, ok: bool) -> None:
    assert MAX_STEP == 2**62
    assert _accepted(_batch(step=step)) is ok  # the JSON body
    assert (_wire.to_step(step) == step) is ok  # the hook drops such a step before sending it
    try:
        TypeAdapter(Step).validate_python(step)  # a step in a query string
        query_ok = True
    except ValidationError:
        query_ok = False
    assert query_ok is ok
    if step >= 0:  # int64 holds it: the packed body can carry it
        assert _packed_accepted(step) is ok


@pytest.mark.parametrize(
    ("key", "ok"),
    [
        ("k" * MAX_KEY_CHARS, True),
        ("é" * MAX_KEY_CHARS, True),  # characters, not bytes
        ("k" * (MAX_KEY_CHARS + 1), False),
        ("", False),
    ],
)
def test_protocol_key_limit_is_the_services_and_the_hooks(key: str, ok: bool) -> None:
    assert MAX_KEY_CHARS == 256
    assert _accepted(_batch(key=key)) is ok
    values, skipped = _wire.convert_values({key: 0.5})
    assert (values, skipped) == (({key: 0.5}, []) if ok else ({}, [repr(key)]))
    if ok:  # the packed parser holds a key to the same schema
        assert _packed_accepted(1, key)


@pytest.mark.parametrize(
    ("run_id", "ok"),
    [
        ("a", True),
        ("r" * 128, True),
        ("2025-01-01_grpo.v2:seed@3+x", True),
        ("", False),
        ("r" * 129, False),
        ("-starts-with-a-dash", False),
        ("has space", False),
        ("a/b", False),
        ("run\n", False),  # Python's $ matches before a final newline; fullmatch does not
        ("é", False),
    ],
)
def test_protocol_run_id_is_the_services_and_the_hooks(run_id: str, ok: bool) -> None:
    assert (RUN_ID.fullmatch(run_id) is not None) is ok
    try:
        TypeAdapter(RunId).validate_python(run_id)
        RunCreate.model_validate({"id": run_id, "project": "p"})
        service_ok = True
    except ValidationError:
        service_ok = False
    assert service_ok is ok
    if ok:
        assert load_config(environ={}, run_id=run_id).run_id == run_id
    else:
        with pytest.raises(rlguard.ConfigError, match="run_id="):
            load_config(environ={}, run_id=run_id)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 0.0, -2.5, 1e308, 5e-324])
def test_protocol_codec_round_trips_both_ways(value: float) -> None:
    def same(a: float, b: float) -> bool:
        return (math.isnan(a) and math.isnan(b)) or a == b

    wire = to_wire(value)
    assert same(from_wire(wire), value)
    assert isinstance(wire, str) is (not math.isfinite(value))
    # hook -> service: the JSON body the hook writes parses back to the value
    sent = json.dumps({"batch_id": "b", "steps": [{"step": 1, "values": {"x": wire}}]})
    assert same(BatchIn.model_validate_json(sent).steps[0].values["x"], value)
    # service -> hook: a series the service answers reads back to the value
    series = SeriesData(
        steps=[1], values=[wire], downsampled=False, method="raw", total_points=1, last_step=1
    )
    assert same(from_wire(json.loads(series.model_dump_json())["values"][0]), value)


def test_protocol_codec_strings_are_the_services_schema_and_nothing_else() -> None:
    assert NON_FINITE.keys() == {"NaN", "Infinity", "-Infinity"}
    assert WIRE_NUMBER_SCHEMA["anyOf"][1] == {"enum": list(NON_FINITE)}
    assert to_wire(None) == "NaN" and math.isnan(from_wire(None))
    for word in ("nan", "inf", "-inf", "+Infinity", "1.5"):
        with pytest.raises(ValueError, match="not a wire number"):
            from_wire(word)
        assert _accepted(_batch(value=word)) is False


def test_protocol_packed_framing_is_what_both_sides_read() -> None:
    batch = _packed.PackedBatch()
    batch.add(3, 1.0, ("a",), [math.inf])
    body = batch.encode("b")
    assert body.startswith(PACKED_MAGIC) and _packed.is_packed(body)
    (length,) = PACKED_HEADER_LENGTH.unpack_from(body, len(PACKED_MAGIC))
    header = body[len(PACKED_MAGIC) + PACKED_HEADER_LENGTH.size :][:length]
    assert json.loads(header) == {"batch_id": "b", "blocks": [{"keys": ["a"], "rows": 1}]}
    assert packed.is_packed(f"{PACKED_CONTENT_TYPE}; charset=binary")
    parsed = packed.parse_packed_batch(body, max_points=10)
    assert parsed.steps[0].step == 3 and parsed.steps[0].values == {"a": math.inf}


def test_protocol_imports_the_standard_library_only() -> None:
    code = (
        "import sys, rlguard.protocol;"
        "heavy = {'numpy', 'torch', 'pydantic', 'sqlalchemy', 'rlguard_backend'};"
        "print(sorted(heavy & set(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
