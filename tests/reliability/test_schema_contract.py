"""The OpenAPI document says what the service accepts: steps are JSON integers up to exactly
2^62, never booleans; per-token arrays are stored as sent, as the schema describes.
(schemathesis with ``--checks all`` over the whole document: ``tests/backend/test_fuzz.py``.)"""

from __future__ import annotations

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


def test_schema_per_token_arrays_of_different_lengths_are_described_and_stored(
    server: RunningServer,
) -> None:
    document = httpx.get(f"{server.url}/openapi.json", timeout=30).json()
    described = document["components"]["schemas"]["SampleTokens"]["description"]
    assert "different lengths are stored as sent" in described
    run_id = new_run_id("tokens")
    assert httpx.post(f"{server.url}/api/v1/runs", json={"id": run_id, "project": "p"}).is_success
    sample = {"step": 1, "index": 0, "tokens": {"text": ["a", "b"], "kl": [0.1]}}
    answer = httpx.post(
        f"{server.url}/api/v1/runs/{run_id}/samples", json={"batch_id": "t", "samples": [sample]}
    )
    assert answer.status_code == 200, answer.text
