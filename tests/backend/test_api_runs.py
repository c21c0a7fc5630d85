"""Runs over the API, on SQLite and PostgreSQL."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import func, select

from rlguard_backend.models import Alert, MetricKey, PointChunk, Rollup
from tests.conftest import new_run_id


def _create(client: TestClient, run_id: str, project: str = "proj", **extra: object) -> dict:
    response = client.post("/api/v1/runs", json={"id": run_id, "project": project, **extra})
    assert response.status_code in (200, 201), response.text
    return response.json()


def test_create_run_twice_returns_same_run(client: TestClient) -> None:
    run_id = new_run_id()
    first = client.post("/api/v1/runs", json={"id": run_id, "project": "p", "config": {"a": 1}})
    second = client.post("/api/v1/runs", json={"id": run_id, "project": "p", "config": {"b": 2}})
    assert (first.status_code, second.status_code) == (201, 200)
    assert second.json()["created_at"] == first.json()["created_at"]
    assert second.json()["config"] == {"a": 1, "b": 2}
    assert client.get("/api/v1/runs", params={"project": "p"}).json()["count"] == 1


def test_create_run_conflict_when_id_in_other_project(client: TestClient) -> None:
    run_id = new_run_id()
    _create(client, run_id, "alpha")
    response = client.post("/api/v1/runs", json={"id": run_id, "project": "beta"})
    assert response.status_code == 409
    assert "alpha" in response.json()["detail"]


def test_create_run_invalid_id_names_field(client: TestClient) -> None:
    response = client.post("/api/v1/runs", json={"id": "has space", "project": "p"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "id"]


def test_create_run_malformed_json_is_400(client: TestClient) -> None:
    response = client.post(
        "/api/v1/runs", content=b'{"id": ', headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert "JSON" in response.json()["detail"]


def test_list_runs_filters_and_pages(client: TestClient) -> None:
    ids = [new_run_id("list") for _ in range(5)]
    for i, run_id in enumerate(ids):
        _create(
            client, run_id, "filtered" if i < 4 else "other", tags=["even"] if i % 2 == 0 else []
        )
    client.patch(f"/api/v1/runs/{ids[0]}", json={"status": "finished"})
    listed = client.get("/api/v1/runs", params={"project": "filtered"}).json()
    assert listed["count"] == 4
    assert {r["id"] for r in listed["data"]} == set(ids[:4])
    page = client.get(
        "/api/v1/runs", params={"project": "filtered", "limit": 3, "offset": 3}
    ).json()
    assert (page["count"], len(page["data"])) == (4, 1)
    tagged = client.get("/api/v1/runs", params={"tag": "even"}).json()
    assert {r["id"] for r in tagged["data"]} == {ids[0], ids[2], ids[4]}
    finished = client.get("/api/v1/runs", params={"status": "finished"}).json()
    assert [r["id"] for r in finished["data"]] == [ids[0]]


def test_list_runs_bad_status_is_422(client: TestClient) -> None:
    response = client.get("/api/v1/runs", params={"status": "exploded"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "status"]


def test_read_run_unknown_is_404(client: TestClient) -> None:
    response = client.get("/api/v1/runs/no-such-run")
    assert response.status_code == 404
    assert "no-such-run" in response.json()["detail"]


def test_update_run_status_and_summary(client: TestClient) -> None:
    run_id = new_run_id()
    _create(client, run_id)
    response = client.patch(
        f"/api/v1/runs/{run_id}", json={"status": "failed", "summary": {"reason": "oom"}}
    )
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["summary"]) == ("failed", {"reason": "oom"})
    bad = client.patch(f"/api/v1/runs/{run_id}", json={"status": "sleeping"})
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["body", "status"]
    assert client.get(f"/api/v1/runs/{run_id}").json()["status"] == "failed"


def test_heartbeat_revives_crashed_run(client: TestClient) -> None:
    run_id = new_run_id()
    _create(client, run_id)
    client.patch(f"/api/v1/runs/{run_id}", json={"status": "crashed"})
    response = client.post(f"/api/v1/runs/{run_id}/heartbeat")
    assert response.status_code == 200
    assert response.json()["status"] == "running"
    assert client.post("/api/v1/runs/ghost/heartbeat").status_code == 404


def test_rewind_supersedes_points_after_step(client: TestClient) -> None:
    run_id = new_run_id()
    _create(client, run_id)
    steps = [{"step": s, "values": {"loss": float(s)}} for s in range(100)]
    client.post(f"/api/v1/runs/{run_id}/batches", json={"batch_id": "b", "steps": steps})
    rewound = client.post(f"/api/v1/runs/{run_id}/rewind", json={"resume_from_step": 59})
    assert rewound.status_code == 200
    assert (rewound.json()["resume_from_step"], rewound.json()["last_step"]) == (59, 59)
    series = client.get(f"/api/v1/runs/{run_id}/series", params={"keys": "loss"}).json()
    assert series["series"]["loss"]["steps"] == list(range(60))
    keys = client.get(f"/api/v1/runs/{run_id}/keys").json()["data"]
    assert (keys[0]["count"], keys[0]["last_step"]) == (60, 59)
    again = [{"step": s, "values": {"loss": -float(s)}} for s in range(60, 80)]
    client.post(f"/api/v1/runs/{run_id}/batches", json={"batch_id": "c", "steps": again})
    values = client.get(f"/api/v1/runs/{run_id}/series", params={"keys": "loss"}).json()
    assert values["series"]["loss"]["values"][60:] == [-float(s) for s in range(60, 80)]


def test_resume_with_resume_from_step_rewinds(client: TestClient) -> None:
    run_id = new_run_id()
    _create(client, run_id)
    steps = [{"step": s, "values": {"x": 1.0}} for s in range(10)]
    client.post(f"/api/v1/runs/{run_id}/batches", json={"batch_id": "b", "steps": steps})
    resumed = _create(client, run_id, resume_from_step=4)
    assert (resumed["resume_from_step"], resumed["last_step"]) == (4, 4)


def test_silent_running_run_is_marked_crashed(client: TestClient) -> None:
    from datetime import timedelta

    from rlguard_backend.core.db import write_session
    from rlguard_backend.detection.liveness import mark_silent_runs_crashed
    from rlguard_backend.models import Run, utcnow

    silent, alive, done = new_run_id(), new_run_id(), new_run_id()
    for run_id in (silent, alive, done):
        _create(client, run_id)
    client.patch(f"/api/v1/runs/{done}", json={"status": "finished"})
    factory = client.app.state.session_factory  # type: ignore[attr-defined]
    with write_session(factory) as session:
        for run_id in (silent, done):
            session.get(Run, run_id).last_heartbeat_at = utcnow() - timedelta(hours=1)  # type: ignore[union-attr]
        session.commit()
    with write_session(factory) as session:
        assert mark_silent_runs_crashed(session, timeout_s=600) == 1
        session.commit()
    statuses = {r: client.get(f"/api/v1/runs/{r}").json()["status"] for r in (silent, alive, done)}
    assert statuses == {silent: "crashed", alive: "running", done: "finished"}
    client.post(f"/api/v1/runs/{silent}/heartbeat")
    assert client.get(f"/api/v1/runs/{silent}").json()["status"] == "running"


def test_nonfinite_numbers_in_config_and_summary_are_kept_as_strings(client: TestClient) -> None:
    run_id = new_run_id()
    body = f'{{"id": "{run_id}", "project": "p", "config": {{"lr": NaN, "clip": [Infinity]}}}}'
    created = client.post(
        "/api/v1/runs", content=body.encode(), headers={"content-type": "application/json"}
    )
    assert created.status_code == 201, created.text
    assert created.json()["config"] == {"lr": "NaN", "clip": ["Infinity"]}
    patched = client.patch(
        f"/api/v1/runs/{run_id}",
        content=b'{"summary": {"best": -Infinity}}',
        headers={"content-type": "application/json"},
    )
    assert patched.json()["summary"] == {"best": "-Infinity"}
    assert client.get(f"/api/v1/runs/{run_id}").json()["config"]["lr"] == "NaN"


def test_runs_delete_removes_the_run_and_all_it_stored(client: TestClient) -> None:
    doomed, kept = new_run_id("doomed"), new_run_id("kept")
    for run_id in (doomed, kept):
        assert client.post("/api/v1/runs", json={"id": run_id, "project": "del"}).status_code == 201
        steps = [{"step": s, "values": {"actor/entropy": "NaN", "x": s}} for s in range(300)]
        client.post(f"/api/v1/runs/{run_id}/batches", json={"batch_id": "b", "steps": steps})
    factory = client.app.state.session_factory  # type: ignore[attr-defined]
    with factory() as session:
        doomed_keys = list(session.scalars(select(MetricKey.id).where(MetricKey.run_id == doomed)))
    answer = client.delete(f"/api/v1/runs/{doomed}")
    assert answer.json() == {"deleted": 1, "run_ids": [doomed]}
    assert client.get(f"/api/v1/runs/{doomed}").status_code == 404
    assert client.delete(f"/api/v1/runs/{doomed}").status_code == 404
    with factory() as session:
        for table in (PointChunk, Rollup):
            left = select(func.count()).select_from(table).where(table.key_id.in_(doomed_keys))
            assert session.scalar(left) == 0, table.__tablename__
        assert session.scalar(select(func.count()).where(Alert.run_id == doomed)) == 0
    assert client.get(f"/api/v1/runs/{kept}/keys").json()["data"][0]["count"] == 300
    gone = client.delete("/api/v1/projects/del").json()
    assert gone == {"deleted": 1, "run_ids": [kept]}
    assert client.delete("/api/v1/projects/del").status_code == 404


def test_list_offsets_past_the_database_integers_are_refused(client: TestClient) -> None:
    for path in ("/api/v1/runs", "/api/v1/alerts"):
        refused = client.get(path, params={"offset": 10**20})
        assert (refused.status_code, refused.json()["detail"][0]["loc"]) == (
            422,
            ["query", "offset"],
        )
        assert client.get(path, params={"offset": 2**62}).json()["data"] == []


def test_runs_archive_leaves_the_lists_and_comes_back(client: TestClient) -> None:
    project = new_run_id("archive")
    kept, archived = new_run_id(), new_run_id()
    for run_id in (kept, archived):
        _create(client, run_id, project)
    steps = [{"step": s, "values": {"actor/entropy": "NaN"}} for s in range(5)]
    batch = {"batch_id": "nan", "steps": steps}
    assert client.post(f"/api/v1/runs/{archived}/batches", json=batch).json()["alerts"]

    def listed(path: str, **params: object) -> set[str]:
        data = client.get(f"/api/v1/{path}", params={"project": project, **params}).json()
        return {item.get("run_id", item["id"]) for item in data["data"]}

    answer = client.post(f"/api/v1/runs/{archived}/archive")
    assert answer.status_code == 200 and answer.json()["archived_at"] is not None
    assert (listed("runs"), listed("runs", archived=True)) == ({kept}, {archived})
    assert (listed("alerts"), listed("alerts", archived=True)) == (set(), {archived})
    assert client.get(f"/api/v1/runs/{archived}/alerts").json()["count"] > 0  # kept whole
    assert client.delete(f"/api/v1/runs/{archived}/archive").json()["archived_at"] is None
    assert listed("runs") == {kept, archived}
    whole = client.post(f"/api/v1/projects/{project}/archive").json()
    assert whole == {"archived": True, "run_ids": sorted([kept, archived])}
    assert listed("runs") == set()
    _create(client, kept, project)  # trained again: in use again
    assert listed("runs") == {kept}
    assert client.delete(f"/api/v1/projects/{project}/archive").json()["archived"] is False
    assert listed("runs") == {kept, archived}
    missing = client.post("/api/v1/projects/no-such-project/archive")
    assert missing.status_code == 404 and "has no runs" in missing.json()["detail"]
    assert client.post("/api/v1/runs/no-such-run/archive").status_code == 404
