"""The API over real HTTP: uvicorn on 127.0.0.1:0, both databases."""

from __future__ import annotations

import gzip
import json
import threading

import httpx

from tests.conftest import RunningServer, new_run_id


def test_http_round_trip_create_ingest_query(db_server: RunningServer) -> None:
    run_id = new_run_id()
    with httpx.Client(base_url=db_server.url, timeout=30) as http:
        assert http.post("/api/v1/runs", json={"id": run_id, "project": "http"}).status_code == 201
        steps = [{"step": s, "values": {"a": s * 0.5, "b": "NaN"}} for s in range(300)]
        body = gzip.compress(json.dumps({"batch_id": "g1", "steps": steps}).encode())
        ack = http.post(
            f"/api/v1/runs/{run_id}/batches",
            content=body,
            headers={"content-encoding": "gzip", "content-type": "application/json"},
        )
        assert ack.status_code == 200 and ack.json()["points"] == 600
        series = http.get(
            f"/api/v1/runs/{run_id}/series", params={"keys": "a,b", "max_points": 100}
        ).json()["series"]
        assert series["a"]["downsampled"] is True and len(series["a"]["steps"]) <= 100
        assert set(series["b"]["values"]) == {"NaN"}
        assert http.get("/api/v1/health").json()["status"] == "ok"
        assert http.get("/docs").status_code == 200
        assert "/api/v1/runs/{run_id}/batches" in http.get("/openapi.json").json()["paths"]


def test_http_concurrent_duplicate_batches_store_once(db_server: RunningServer) -> None:
    run_id = new_run_id()
    steps = [{"step": s, "values": {"x": float(s)}} for s in range(500)]
    payload = {"batch_id": "dup", "steps": steps}
    with httpx.Client(base_url=db_server.url, timeout=30) as http:
        http.post("/api/v1/runs", json={"id": run_id, "project": "http"})
    answers: list[dict] = []

    def send() -> None:
        with httpx.Client(base_url=db_server.url, timeout=60) as http:
            answers.append(http.post(f"/api/v1/runs/{run_id}/batches", json=payload).json())

    threads = [threading.Thread(target=send) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(a["duplicate"] for a in answers) == [False, True, True, True]
    with httpx.Client(base_url=db_server.url, timeout=30) as http:
        keys = http.get(f"/api/v1/runs/{run_id}/keys").json()["data"]
    assert keys[0]["count"] == 500


def test_http_error_statuses_are_json(db_server: RunningServer) -> None:
    with httpx.Client(base_url=db_server.url, timeout=30) as http:
        cases = {
            404: http.get("/api/v1/runs/missing"),
            422: http.post("/api/v1/runs", json={"project": "p"}),
            400: http.post(
                "/api/v1/runs", content=b"{", headers={"content-type": "application/json"}
            ),
        }
    for status, response in cases.items():
        assert response.status_code == status
        assert response.headers["content-type"].startswith("application/json")
        assert response.json()["detail"]


def test_http_openapi_document_refs_all_resolve(db_server: RunningServer) -> None:
    document = httpx.get(f"{db_server.url}/openapi.json", timeout=30).json()
    refs: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            refs.update(v for k, v in node.items() if k == "$ref")
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(document)
    assert "#/components/schemas/StepIn" in refs  # the batch body's steps
    assert {r for r in refs if r.split("/")[-1] not in document["components"]["schemas"]} == set()
