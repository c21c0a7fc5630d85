"""The packed points body over real HTTP, both databases: the same batch as its JSON, and each
malformed part refused with a status and a detail that names it."""

from __future__ import annotations

import json
import math
import struct

import httpx
import pytest

from rlguard import _packed
from rlguard.protocol import PACKED_CONTENT_TYPE, PACKED_MAGIC
from rlguard_backend.core.app import create_app
from rlguard_backend.core.config import Settings
from rlguard_backend.core.serve import ServerThread
from tests.conftest import RunningServer, new_run_id

PACKED = {"content-type": PACKED_CONTENT_TYPE}


def _packed_body(batch_id: str = "p1") -> bytes:
    batch = _packed.PackedBatch()
    for step in range(50):
        batch.add(step, 1e9 + step, ("a", "b"), [step / 3, math.nan if step == 7 else -step])
    batch.add(50, 1e9 + 50, ("a", "c"), [math.inf, 0.1])
    return batch.encode(batch_id)


def _series(http: httpx.Client, run_id: str) -> dict[str, object]:
    answer = http.get(f"/api/v1/runs/{run_id}/series", params={"keys": "a,b,c"}).json()
    return {k: (v["steps"], v["values"]) for k, v in answer["series"].items()}


def test_packed_batch_stores_what_its_json_stores(db_server: RunningServer) -> None:
    packed_run, json_run = new_run_id(), new_run_id()
    body = _packed_body()
    with httpx.Client(base_url=db_server.url, timeout=30) as http:
        for run_id in (packed_run, json_run):
            http.post("/api/v1/runs", json={"id": run_id, "project": "packed"})
        ack = http.post(f"/api/v1/runs/{packed_run}/batches", content=body, headers=PACKED)
        assert ack.status_code == 200, ack.text
        assert ack.json() | {"alerts": []} == {
            "batch_id": "p1",
            "duplicate": False,
            "points": 102,
            "steps": 51,
            "alerts": [],
            "commands": [],
        }
        as_json = _packed.to_json_body(body)
        answer = http.post(
            f"/api/v1/runs/{json_run}/batches",
            content=as_json,
            headers={"content-type": "application/json", "content-encoding": "gzip"},
        )
        assert answer.status_code == 200
        again = http.post(f"/api/v1/runs/{packed_run}/batches", content=body, headers=PACKED)
        assert again.json()["duplicate"] is True
        stored = _series(http, packed_run)
        assert stored == _series(http, json_run)
        assert stored["c"] == ([50], [0.1])
        assert stored["a"][1][:2] == [0.0, 1 / 3] and stored["a"][1][50] == "Infinity"
        assert stored["b"][1][7] == "NaN"


def _with_header(header: dict[str, object], payload: bytes) -> bytes:
    text = json.dumps(header).encode()
    return PACKED_MAGIC + struct.pack("<I", len(text)) + text + payload


ROW = struct.pack("<q", 1) + struct.pack("<d", 0.0) + struct.pack("<d", 2.0)


@pytest.mark.parametrize(
    ("body", "status", "detail"),
    [
        (b"not packed", 400, "starts with"),
        (PACKED_MAGIC + b"\x01", 400, "header length"),
        (PACKED_MAGIC + struct.pack("<I", 99) + b"{}", 400, "inside its header"),
        (
            _with_header({"batch_id": "x", "blocks": [{"keys": ["a"], "rows": 1}]}, ROW[:-1]),
            400,
            "declares 24",
        ),
        (
            _with_header({"batch_id": "x", "blocks": [{"keys": ["a", "a"], "rows": 1}]}, ROW),
            422,
            "each key once",
        ),
        (
            _with_header(
                {"batch_id": "x", "blocks": [{"keys": ["a"], "rows": 1}]},
                struct.pack("<q", -1) + ROW[8:],
            ),
            422,
            "outside",
        ),
        (_with_header({"batch_id": "", "blocks": []}, b""), 422, "batch_id"),
        (_with_header({"batch_id": "x", "blocks": [{"keys": [], "rows": 1}]}, b""), 422, "keys"),
        (b"".join([PACKED_MAGIC, struct.pack("<I", 2), b"[]"]), 400, "JSON object"),
    ],
)
def test_packed_batch_malformed_parts_are_refused(
    server: RunningServer, body: bytes, status: int, detail: str
) -> None:
    run_id = new_run_id()
    with httpx.Client(base_url=server.url, timeout=30) as http:
        http.post("/api/v1/runs", json={"id": run_id, "project": "packed"})
        answer = http.post(f"/api/v1/runs/{run_id}/batches", content=body, headers=PACKED)
        assert answer.status_code == status
        assert detail in json.dumps(answer.json()["detail"])
        assert http.get(f"/api/v1/runs/{run_id}/keys").json()["count"] == 0


def test_packed_batch_over_the_point_limit_is_413(sqlite_url: str) -> None:
    run_id = new_run_id()
    app = create_app(Settings(database_url=sqlite_url, max_batch_points=100))
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        http.post("/api/v1/runs", json={"id": run_id, "project": "packed"})
        answer = http.post(f"/api/v1/runs/{run_id}/batches", content=_packed_body(), headers=PACKED)
    app.state.engine.dispose()
    assert answer.status_code == 413 and "102 points" in answer.json()["detail"]
