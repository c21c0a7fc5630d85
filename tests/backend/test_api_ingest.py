"""Batch ingest over the API: idempotency, last write wins, non-finite values, limits, atomicity."""

from __future__ import annotations

import gzip
import json
import math

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from rlguard_backend.core.app import create_app
from rlguard_backend.core.config import Settings
from tests.conftest import new_run_id


@pytest.fixture
def run_id(client: TestClient) -> str:
    run = new_run_id()
    assert client.post("/api/v1/runs", json={"id": run, "project": "p"}).status_code == 201
    return run


def _post(client: TestClient, run_id: str, body: object, **headers: str):  # type: ignore[no-untyped-def]
    return client.post(f"/api/v1/runs/{run_id}/batches", json=body, headers=headers)


def _values(client: TestClient, run_id: str, key: str) -> list[object]:
    response = client.get(f"/api/v1/runs/{run_id}/series", params={"keys": key})
    return response.json()["series"][key]["values"]


def _point_count(client: TestClient) -> int:
    with client.app.state.session_factory() as session:  # type: ignore[attr-defined]
        return int(
            session.execute(text("SELECT coalesce(sum(count), 0) FROM point_chunks")).scalar_one()
        )


def test_ingest_batch_stores_every_point(client: TestClient, run_id: str) -> None:
    steps = [{"step": s, "values": {f"k{j}": s + j / 10 for j in range(20)}} for s in range(100)]
    response = _post(client, run_id, {"batch_id": "b1", "steps": steps})
    assert response.status_code == 200
    assert response.json() == {
        "batch_id": "b1",
        "duplicate": False,
        "points": 2000,
        "steps": 100,
        "alerts": [],
        "commands": [],
    }
    assert _point_count(client) == 2000
    assert _values(client, run_id, "k3")[:3] == [0.3, 1.3, 2.3]
    assert client.get(f"/api/v1/runs/{run_id}").json()["last_step"] == 99


def test_ingest_replayed_batch_id_writes_nothing(client: TestClient, run_id: str) -> None:
    first = {"batch_id": "same", "steps": [{"step": 1, "values": {"x": 1.0}}]}
    replay = {"batch_id": "same", "steps": [{"step": 1, "values": {"x": 99.0}}]}
    assert _post(client, run_id, first).json()["duplicate"] is False
    assert _post(client, run_id, replay).json()["duplicate"] is True
    assert _values(client, run_id, "x") == [1.0]


def test_ingest_later_write_for_same_step_wins(client: TestClient, run_id: str) -> None:
    _post(
        client,
        run_id,
        {"batch_id": "a", "steps": [{"step": s, "values": {"x": 1.0}} for s in range(200)]},
    )
    _post(client, run_id, {"batch_id": "b", "steps": [{"step": 150, "values": {"x": 7.0}}]})
    within = {
        "batch_id": "c",
        "steps": [{"step": 3, "values": {"x": 5.0}}, {"step": 3, "values": {"x": 6.0}}],
    }
    _post(client, run_id, within)
    values = _values(client, run_id, "x")
    assert (len(values), values[150], values[3]) == (200, 7.0, 6.0)
    keys = client.get(f"/api/v1/runs/{run_id}/keys").json()["data"]
    assert keys[0]["count"] == 200


def test_ingest_nonfinite_values_round_trip(client: TestClient, run_id: str) -> None:
    values = {"nan": "NaN", "pinf": "Infinity", "ninf": "-Infinity", "tiny": 5e-324, "big": 1.7e308}
    _post(client, run_id, {"batch_id": "nf", "steps": [{"step": 0, "values": values}]})
    series = client.get(f"/api/v1/runs/{run_id}/series", params={"keys": ",".join(values)}).json()[
        "series"
    ]
    assert {k: v["values"][0] for k, v in series.items()} == values
    csv_text = client.get(f"/api/v1/runs/{run_id}/export", params={"keys": "nan,pinf,ninf"}).text
    assert csv_text.splitlines() == ["step,nan,pinf,ninf", "0,NaN,inf,-inf"]


def test_ingest_gzip_body(client: TestClient, run_id: str) -> None:
    body = json.dumps({"batch_id": "gz", "steps": [{"step": 2, "values": {"x": 2.5}}]}).encode()
    response = client.post(
        f"/api/v1/runs/{run_id}/batches",
        content=gzip.compress(body),
        headers={"content-encoding": "gzip", "content-type": "application/json"},
    )
    assert response.status_code == 200
    assert _values(client, run_id, "x") == [2.5]


@pytest.mark.parametrize(
    ("content", "encoding", "fragment"),
    [
        (b"{not json", None, "JSON"),
        (b"[1, 2]", None, "JSON object"),
        (b"\x1f\x8b garbage", "gzip", "gzip"),
        (gzip.compress(b'{"batch_id": "x", "steps": []}', mtime=0)[:-6], "gzip", "truncated"),
        (b"{}", "br", "Content-Encoding"),
    ],
)
def test_ingest_malformed_body_is_400(
    client: TestClient, run_id: str, content: bytes, encoding: str | None, fragment: str
) -> None:
    headers = {"content-type": "application/json"} | (
        {"content-encoding": encoding} if encoding else {}
    )
    response = client.post(f"/api/v1/runs/{run_id}/batches", content=content, headers=headers)
    assert response.status_code == 400
    assert fragment in response.json()["detail"]
    assert _point_count(client) == 0


def test_ingest_invalid_value_is_422_naming_field_and_writes_nothing(
    client: TestClient, run_id: str
) -> None:
    steps = [{"step": s, "values": {"x": 1.0}} for s in range(50)] + [
        {"step": 50, "values": {"x": "lots"}}
    ]
    response = _post(client, run_id, {"batch_id": "bad", "steps": steps})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["steps", 50, "values", "x"]
    assert _point_count(client) == 0
    ok = _post(client, run_id, {"batch_id": "bad", "steps": steps[:50]})
    assert ok.json()["duplicate"] is False


def test_ingest_unknown_run_is_404(client: TestClient) -> None:
    response = _post(
        client, "nobody", {"batch_id": "x", "steps": [{"step": 0, "values": {"a": 1}}]}
    )
    assert response.status_code == 404
    assert _point_count(client) == 0


def test_ingest_too_large_is_413(db_url: str) -> None:
    app = create_app(Settings(database_url=db_url, max_batch_bytes=2000, max_batch_points=50))
    with TestClient(app) as client:
        run_id = new_run_id()
        client.post("/api/v1/runs", json={"id": run_id, "project": "p"})
        many = [{"step": s, "values": {"x": 1.0}} for s in range(60)]
        assert _post(client, run_id, {"batch_id": "n", "steps": many}).status_code == 413
        wide = [{"step": 0, "values": {f"key{i}": 1.0 for i in range(49)}}] * 4
        assert _post(client, run_id, {"batch_id": "w", "steps": wide}).status_code == 413
        bomb = gzip.compress(json.dumps({"batch_id": "z", "steps": [], "pad": " " * 5000}).encode())
        response = client.post(
            f"/api/v1/runs/{run_id}/batches", content=bomb, headers={"content-encoding": "gzip"}
        )
        assert response.status_code == 413
        assert "RLGUARD_MAX_BATCH_BYTES" in response.json()["detail"]
        assert _point_count(client) == 0
    app.state.engine.dispose()


def test_ingest_failure_mid_write_leaves_nothing(sqlite_url: str) -> None:
    app = create_app(Settings(database_url=sqlite_url))
    with TestClient(app, raise_server_exceptions=False) as client:
        run_id = new_run_id()
        client.post("/api/v1/runs", json={"id": run_id, "project": "p"})
        with app.state.engine.begin() as conn:
            conn.exec_driver_sql(
                # Fails on the second key's chunk, after the first one is written.
                "CREATE TRIGGER fail_second BEFORE INSERT ON point_chunks "
                "WHEN (SELECT count(*) FROM point_chunks) >= 1 "
                "BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
            )
        steps = [{"step": s, "values": {"a": 1.0, "b": 2.0}} for s in range(1000)]
        failed = _post(client, run_id, {"batch_id": "atomic", "steps": steps})
        assert failed.status_code >= 500
        assert failed.json()["detail"]
        assert _point_count(client) == 0
        assert client.get(f"/api/v1/runs/{run_id}").json()["last_step"] is None
        with app.state.engine.begin() as conn:
            conn.exec_driver_sql("DROP TRIGGER fail_second")
        retried = _post(client, run_id, {"batch_id": "atomic", "steps": steps})
        assert retried.json()["duplicate"] is False
        assert _point_count(client) == 2000
    app.state.engine.dispose()


def test_ingest_keys_listed_with_counts(client: TestClient, run_id: str) -> None:
    steps = [
        {
            "step": s,
            "values": {"actor/entropy": 1.0, "odd": 1.0} if s % 2 else {"actor/entropy": 1.0},
        }
        for s in range(10)
    ]
    _post(client, run_id, {"batch_id": "k", "steps": steps})
    keys = {k["name"]: k for k in client.get(f"/api/v1/runs/{run_id}/keys").json()["data"]}
    assert (keys["actor/entropy"]["count"], keys["odd"]["count"]) == (10, 5)
    assert (keys["odd"]["first_step"], keys["odd"]["last_step"]) == (1, 9)
    assert math.isclose(float(_values(client, run_id, "odd")[0]), 1.0)
