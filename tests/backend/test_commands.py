"""Stop and checkpoint commands over REST: asked, carried in batch replies, reported, drawn."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.backend.test_auth import Service, service
from tests.conftest import RunningServer, new_run_id

API = "/api/v1"
__all__ = ["service"]  # the fixture, used by name below


def new_run(http: httpx.Client) -> str:
    run_id = new_run_id("cmd")
    assert http.post("/runs", json={"id": run_id, "project": "commands"}).status_code == 201
    return run_id


def post_batch(http: httpx.Client, run_id: str, step: int) -> dict:
    body = {"batch_id": new_run_id("b"), "steps": [{"step": step, "values": {"x": 1.0}}]}
    answer = http.post(f"/runs/{run_id}/batches", json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_commands_stop_is_carried_in_the_next_batch_reply_until_received(
    db_server: RunningServer,
) -> None:
    with httpx.Client(base_url=db_server.url + API, timeout=30) as http:
        run_id = new_run(http)
        assert post_batch(http, run_id, 0)["commands"] == []
        asked = http.post(f"/runs/{run_id}/stop", json={"reason": "entropy collapsed"})
        assert asked.status_code == 202
        stop = asked.json()
        assert (stop["kind"], stop["state"], stop["reason"]) == (
            "stop",
            "pending",
            "entropy collapsed",
        )
        assert stop["requested_by"] == "local (auth off)" and stop["requested_step"] == 0
        carried = post_batch(http, run_id, 1)["commands"]
        assert [c["id"] for c in carried] == [stop["id"]]
        assert post_batch(http, run_id, 2)["commands"] == [carried[0]]  # not received yet
        report = f"/runs/{run_id}/commands/{stop['id']}"
        assert http.patch(report, json={"delivered": True}).json()["state"] == "delivered"
        assert post_batch(http, run_id, 3)["commands"] == []
        acted = http.patch(report, json={"acted": True, "step": 3}).json()
        assert (acted["state"], acted["acted_step"]) == ("acted", 3)
        again = http.patch(report, json={"acted": True, "step": 9}).json()
        assert again["acted_step"] == 3 and again["acted_at"] == acted["acted_at"]
        history = http.get(f"/runs/{run_id}/commands").json()
        assert history["count"] == 1 and history["data"][0]["state"] == "acted"
        markers = http.get(f"/runs/{run_id}/markers").json()["data"]
        assert [(m["kind"], m["step"]) for m in markers] == [("stop", 3)]
        assert markers[0]["label"] == "stop by local (auth off): entropy collapsed"


def test_commands_refuse_a_repeat_a_finished_run_and_a_foreign_alert(
    db_server: RunningServer,
) -> None:
    with httpx.Client(base_url=db_server.url + API, timeout=30) as http:
        run_id, other = new_run(http), new_run(http)
        assert http.post(f"/runs/{run_id}/stop").status_code == 202
        repeat = http.post(f"/runs/{run_id}/stop")
        assert repeat.status_code == 409
        assert "already has a stop waiting" in repeat.json()["detail"]
        assert "next batch or poll" in repeat.json()["detail"]
        assert http.post(f"/runs/{run_id}/checkpoint").status_code == 202  # another kind
        steps = [{"step": s, "values": {"actor/entropy": "NaN"}} for s in range(5)]
        ack = http.post(f"/runs/{other}/batches", json={"batch_id": "nan", "steps": steps})
        alert_id = ack.json()["alerts"][0]["id"]
        foreign = http.post(f"/runs/{new_run(http)}/checkpoint", json={"alert_id": alert_id})
        assert (
            foreign.status_code == 422
            and "not an alert of run" in foreign.json()["detail"][0]["msg"]
        )
        assert http.patch(f"/runs/{other}", json={"status": "finished"}).status_code == 200
        finished = http.post(f"/runs/{other}/stop", json={"alert_id": alert_id})
        assert finished.status_code == 409
        assert f"run {other!r} is finished" in finished.json()["detail"]
        missing = http.patch(f"/runs/{other}/commands/999999", json={"delivered": True})
        assert missing.status_code == 404 and "commands lists" in missing.json()["detail"]
        bad = http.post(f"/runs/{run_id}/stop", json={"reason": "x", "force": True})
        assert bad.status_code == 422
        assert http.get(f"/runs/{run_id}/commands?pending=true").json()["count"] == 2


def test_commands_many_clients_asking_at_once_get_one_stop(db_server: RunningServer) -> None:
    """More simultaneous askers than worker threads and connections: exactly one 202."""
    with httpx.Client(base_url=db_server.url + API, timeout=60) as http:
        run_id = new_run(http)

        def ask(_: int) -> int:
            with httpx.Client(base_url=db_server.url + API, timeout=60) as own:
                return own.post(f"/runs/{run_id}/stop", json={"reason": "now"}).status_code

        with ThreadPoolExecutor(48) as pool:
            codes = list(pool.map(ask, range(48)))
        assert sorted(set(codes)) == [202, 409] and codes.count(202) == 1
        assert http.get(f"/runs/{run_id}/commands").json()["count"] == 1


def test_commands_name_a_run_by_its_name_or_project_and_name(db_server: RunningServer) -> None:
    """As every read does: a name finds the run, ``?project=`` tells namesakes apart, and a
    name several runs share is answered 409 listing them."""
    name, project = new_run_id("named"), new_run_id("proj")
    with httpx.Client(base_url=db_server.url + API, timeout=30) as http:
        run_id = new_run_id("cmd")
        created = http.post("/runs", json={"id": run_id, "project": project, "name": name})
        assert created.status_code == 201
        stop = http.post(f"/runs/{name}/stop", json={"reason": "by name"})
        assert stop.status_code == 202, stop.text
        assert stop.json()["run_id"] == run_id
        checkpoint = http.post(f"/runs/{name}/checkpoint", params={"project": project})
        assert checkpoint.status_code == 202 and checkpoint.json()["run_id"] == run_id
        history = http.get(f"/runs/{name}/commands", params={"project": project}).json()
        assert [c["kind"] for c in history["data"]] == ["stop", "checkpoint"]
        elsewhere = http.post(f"/runs/{name}/stop", params={"project": "other"})
        assert elsewhere.status_code == 404 and "in project 'other'" in elsewhere.text
        twin = new_run_id("cmd")
        assert http.post("/runs", json={"id": twin, "project": "p2", "name": name}).is_success
        ambiguous = http.post(f"/runs/{name}/stop")
        assert ambiguous.status_code == 409
        assert run_id in ambiguous.json()["detail"] and twin in ambiguous.json()["detail"]
        assert http.get(f"/runs/{name}/commands").status_code == 409
        assert http.post(f"/runs/{name}/stop", params={"project": "p2"}).status_code == 202
        assert http.get(f"/runs/{twin}/commands").json()["count"] == 1


def test_commands_record_the_user_a_token_asks_for_beside_its_name(service: Service) -> None:
    """The dashboard behind SSO asks with its own token for the signed-in user: the command
    records both, so no token can pass for another; a read token cannot ask at all."""
    admin = {"Authorization": f"Bearer {service.tokens['admin']}"}
    with httpx.Client(base_url=service.url + API, headers=admin, timeout=30) as http:
        run_id = new_run(http)
        body = {"reason": "seen enough", "on_behalf_of": " alice@example.com "}
        for scope in ("read", "write"):
            asked = http.post(
                f"/runs/{run_id}/stop",
                json=body,
                headers={"Authorization": f"Bearer {service.tokens[scope]}"},
            )
            assert asked.status_code == {"read": 403, "write": 202}[scope], asked.text
        assert asked.json()["requested_by"] == "alice@example.com (via test-write)"
        own = http.post(f"/runs/{run_id}/checkpoint").json()
        assert own["requested_by"] == "test-admin"
        blank = http.post(f"/runs/{run_id}/checkpoint", json={"on_behalf_of": "  "})
        assert blank.status_code == 422
