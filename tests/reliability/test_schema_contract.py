"""The OpenAPI document says what the service accepts: schemathesis with ``--checks all`` over
real HTTP finds nothing but the rules JSON Schema cannot state (per-token arrays of one length,
described in the schema and refused with 422; a step range's order; a calendar date; a limit
that is a setting); steps are JSON integers up to exactly 2^62, never booleans."""

from __future__ import annotations

import shutil
import subprocess
import sys
from typing import Any

import httpx

from tests.conftest import RunningServer, new_run_id

MAX_STEP = 2**62


def _create(server: RunningServer, **fields: Any) -> httpx.Response:
    body = {"id": new_run_id("contract"), "project": "contract", **fields}
    return httpx.post(f"{server.url}/api/v1/runs", json=body, timeout=30)


def test_schema_step_maximum_is_the_exact_integer_the_service_takes(server: RunningServer) -> None:
    document = httpx.get(f"{server.url}/openapi.json", timeout=30).text
    assert '"maximum":4611686018427387904' in document.replace(" ", "")
    assert "4.611686018427388e+18" not in document  # 96 above 2^62 when read as a decimal
    assert _create(server, resume_from_step=MAX_STEP).status_code == 201
    assert _create(server, resume_from_step=MAX_STEP + 1).status_code == 422
    assert _create(server, resume_from_step=163.0).status_code == 201  # a JSON integer too


def test_schema_boolean_or_string_steps_are_refused(server: RunningServer) -> None:
    for value in (False, True, "3", 1.5):
        answer = _create(server, resume_from_step=value)
        assert answer.status_code == 422, (value, answer.text)
        assert answer.json()["detail"][0]["loc"] == ["body", "resume_from_step"]


def test_schema_per_token_arrays_of_different_lengths_are_described_and_refused(
    server: RunningServer,
) -> None:
    document = httpx.get(f"{server.url}/openapi.json", timeout=30).json()
    described = document["components"]["schemas"]["SampleTokens"]["description"]
    assert "same length" in described and "422" in described
    run_id = new_run_id("tokens")
    assert httpx.post(f"{server.url}/api/v1/runs", json={"id": run_id, "project": "p"}).is_success
    sample = {"step": 1, "index": 0, "tokens": {"text": ["a", "b"], "kl": [0.1]}}
    answer = httpx.post(
        f"{server.url}/api/v1/runs/{run_id}/samples", json={"batch_id": "t", "samples": [sample]}
    )
    assert answer.status_code == 422 and "different lengths" in answer.text


def test_schemathesis_all_checks_find_only_the_documented_token_rule(
    server: RunningServer,
) -> None:
    binary = shutil.which("schemathesis", path=str(sys.prefix) + "/bin") or "schemathesis"
    # -w: workers (-n is --max-examples: "-n 1" after "--max-examples 30" had fuzzed 1 case)
    options = ["--checks", "all", "--max-examples", "4", "--seed", "7", "-w", "1", "--no-color"]
    result = subprocess.run(
        [binary, "run", f"{server.url}/openapi.json", *options],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    report = result.stdout
    assert " generated" in report, report[-3000:]
    failures = [line.strip() for line in report.splitlines() if line.strip().startswith("- ST")]
    refusals = [line for line in report.splitlines() if '"detail"' in line]
    assert set(failures) <= {"- ST202 Schema-valid request rejected"}, report[-6000:]
    # Rules a JSON schema cannot state: equal-length per-token arrays, a step range whose end is
    # not before its start, and a runs-list filter's date the calendar lacks (2026-02-30), each
    # refused with 422 naming the field.
    documented = (
        "per-token arrays have different lengths",
        "to_step must be at least from_step",
        "is not a date on the calendar",
        "exceeds the server limit",  # max_points past RLGUARD_MAX_SERIES_POINTS: a setting, 413
        "unknown threshold",  # a backtest's thresholds: a free map whose names the 422 lists
    )
    unexplained = [line for line in refusals if not any(rule in line for rule in documented)]
    assert unexplained == []
