"""Runs named by their name on every read route, on SQLite and PostgreSQL; 404 and 409 wording."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.conftest import new_run_id

READS = ("", "/keys", "/series", "/export", "/markers", "/alerts", "/samples", "/sample-steps")


def _create(client: TestClient, run_id: str, project: str, name: str) -> None:
    response = client.post("/api/v1/runs", json={"id": run_id, "project": project, "name": name})
    assert response.status_code == 201, response.text


def _nan_entropy(client: TestClient, run_id: str) -> list[dict]:
    """Points whose NaN entropy opens an alert; the alerts the batch's answer carries."""
    steps = [{"step": s, "values": {"actor/entropy": "NaN"}} for s in range(20)]
    answer = client.post(f"/api/v1/runs/{run_id}/batches", json={"batch_id": "b", "steps": steps})
    assert answer.status_code == 200 and answer.json()["alerts"], answer.text
    alerts: list[dict] = answer.json()["alerts"]
    return alerts


def test_read_routes_answer_for_a_runs_name_as_for_its_id(client: TestClient) -> None:
    run_id, name = new_run_id("named"), new_run_id("collapse-seed0")
    _create(client, run_id, "names", name)
    _nan_entropy(client, run_id)
    for suffix in READS:
        by_id = client.get(f"/api/v1/runs/{run_id}{suffix}")
        by_name = client.get(f"/api/v1/runs/{name}{suffix}")
        assert (by_id.status_code, by_name.status_code) == (200, 200), (suffix, by_name.text)
        if suffix != "/export":
            assert by_name.json() == by_id.json(), suffix
    assert client.get(f"/api/v1/runs/{name}").json()["id"] == run_id
    assert client.get(f"/api/v1/runs/{name}/series").json()["run_id"] == run_id
    csv = client.get(f"/api/v1/runs/{name}/export")
    assert csv.text.splitlines()[0] == "step,actor/entropy"
    assert f'filename="{run_id}.csv"' in csv.headers["content-disposition"]


def test_read_run_unknown_name_is_404_without_create_advice(client: TestClient) -> None:
    for suffix in READS:
        answer = client.get(f"/api/v1/runs/no-such-run{suffix}")
        assert answer.status_code == 404, suffix
        detail = answer.json()["detail"]
        assert "'no-such-run'" in detail and "GET /api/v1/runs" in detail, detail
        assert "create" not in detail, detail


def test_read_run_name_of_several_runs_is_409_listing_them(client: TestClient) -> None:
    name = new_run_id("seed")
    first, second = new_run_id("a"), new_run_id("b")
    _create(client, first, "proj-a", name)
    _create(client, second, "proj-b", name)
    for suffix in READS:
        answer = client.get(f"/api/v1/runs/{name}{suffix}")
        assert answer.status_code == 409, suffix
    detail = client.get(f"/api/v1/runs/{name}").json()["detail"]
    assert detail.startswith(f"2 runs are named {name!r}: {second} (project 'proj-b', started ")
    assert f"; {first} (project 'proj-a', started " in detail
    assert "?project=" in detail, detail
    chosen = client.get(f"/api/v1/runs/{name}", params={"project": "proj-a"})
    assert chosen.status_code == 200 and chosen.json()["id"] == first
    series = client.get(f"/api/v1/runs/{name}/series", params={"project": "proj-b"})
    assert series.json()["run_id"] == second
    elsewhere = client.get(f"/api/v1/runs/{name}", params={"project": "proj-c"})
    assert elsewhere.status_code == 404
    assert "in project 'proj-c'" in elsewhere.json()["detail"]


def test_read_run_409_lists_ten_namesakes_and_counts_the_rest(client: TestClient) -> None:
    name = new_run_id("sweep")
    for _ in range(12):
        _create(client, new_run_id("s"), "sweep", name)
    detail = client.get(f"/api/v1/runs/{name}").json()["detail"]
    assert detail.startswith(f"12 runs are named {name!r}: ")
    assert detail.count("(project 'sweep', started ") == 10
    assert "; and 2 more." in detail


def test_read_run_id_wins_over_a_name(client: TestClient) -> None:
    """A run whose name is another run's id is reached by its own id or its project."""
    first = new_run_id("first")
    second = new_run_id("second")
    _create(client, first, "ids", "first-run")
    _create(client, second, "ids-other", first)
    assert client.get(f"/api/v1/runs/{first}").json()["id"] == first
    own = client.get(f"/api/v1/runs/{first}", params={"project": "ids-other"})
    assert own.json()["id"] == second


def test_alerts_carry_their_runs_name_and_project(client: TestClient) -> None:
    run_id, name = new_run_id("alerted"), new_run_id("nan-run")
    _create(client, run_id, "alert-names", name)
    opened = _nan_entropy(client, run_id)
    assert {(a["run_name"], a["project"]) for a in opened} == {(name, "alert-names")}
    listed = client.get("/api/v1/alerts", params={"run_id": name}).json()
    assert listed["count"] >= 1
    assert {(a["run_id"], a["run_name"], a["project"]) for a in listed["data"]} == {
        (run_id, name, "alert-names")
    }
    alert_id = listed["data"][0]["id"]
    patched = client.patch(f"/api/v1/alerts/{alert_id}", json={"acknowledged": True}).json()
    assert (patched["run_name"], patched["project"]) == (name, "alert-names")
    unnamed = new_run_id("unnamed")
    client.post("/api/v1/runs", json={"id": unnamed, "project": "alert-names"})
    _nan_entropy(client, unnamed)
    alerts = client.get("/api/v1/alerts", params={"run_id": unnamed}).json()["data"]
    assert {(a["run_name"], a["project"]) for a in alerts} == {(None, "alert-names")}
    missing = client.get("/api/v1/alerts", params={"run_id": "no-such-run"})
    assert missing.status_code == 404
