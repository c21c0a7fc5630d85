"""A project's command policies: applied on ingest once a run, dry runs recorded, backtests."""

from __future__ import annotations

import httpx

from tests.conftest import RunningServer, new_run_id

API = "/api/v1"
NAN_STEP = {"actor/entropy": "NaN", "critic/score/mean": 0.1}


def new_run(http: httpx.Client, project: str) -> str:
    run_id = new_run_id("policy")
    assert http.post("/runs", json={"id": run_id, "project": project}).status_code == 201
    return run_id


def post_step(http: httpx.Client, run_id: str, step: int) -> dict:
    body = {"batch_id": f"b{step}", "steps": [{"step": step, "values": NAN_STEP}]}
    answer = http.post(f"/runs/{run_id}/batches", json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_policies_stop_a_run_once_its_alert_has_persisted(db_server: RunningServer) -> None:
    project = new_run_id("proj")
    with httpx.Client(base_url=db_server.url + API, timeout=30) as http:
        rule = {"alert": "nonfinite", "severity": "critical", "persist_steps": 3}
        created = http.post(f"/projects/{project}/policies", json=rule)
        assert created.status_code == 201
        policy = created.json()
        assert (policy["action"], policy["dry_run"], policy["project"]) == ("stop", False, project)
        run_id = new_run(http, project)
        carried = [post_step(http, run_id, step)["commands"] for step in range(6)]
        assert carried[:3] == [[], [], []]  # the alert opens at 0; it has held 3 steps at 3
        [stop] = carried[3]
        alert = http.get(f"/runs/{run_id}/alerts").json()["data"][0]
        assert (stop["kind"], stop["requested_by"], stop["alert_id"]) == (
            "stop",
            f"policy {policy['id']}",
            alert["id"],
        )
        assert stop["policy_id"] == policy["id"] and stop["requested_step"] == 3
        assert stop["reason"].startswith("critical nonfinite/")
        assert carried[4] == carried[5] == [stop]  # until the hook says it received it
        assert http.get(f"/runs/{run_id}/commands").json()["count"] == 1  # once a run
        listed = http.get(f"/projects/{project}/policies").json()
        assert listed["count"] == 1 and listed["data"][0]["id"] == policy["id"]
        other = new_run(http, "another-project")
        assert all(post_step(http, other, s)["commands"] == [] for s in range(5))


def test_policies_dry_run_records_what_it_would_do_and_sends_nothing(
    db_server: RunningServer,
) -> None:
    project = new_run_id("proj")
    with httpx.Client(base_url=db_server.url + API, timeout=30) as http:
        rule = {"alert": "nonfinite", "action": "checkpoint", "dry_run": True}
        policy = http.post(f"/projects/{project}/policies", json=rule).json()
        run_id = new_run(http, project)
        assert all(post_step(http, run_id, s)["commands"] == [] for s in range(3))
        [recorded] = http.get(f"/runs/{run_id}/commands").json()["data"]
        assert recorded["dry_run"] is True and recorded["kind"] == "checkpoint"
        assert recorded["policy_id"] == policy["id"] and recorded["state"] == "pending"
        markers = http.get(f"/runs/{run_id}/markers").json()["data"]
        assert [m["label"].split(" by ")[0] for m in markers] == ["would checkpoint"]
        assert http.post(f"/runs/{run_id}/checkpoint").status_code == 202  # not blocked by it
        removed = http.delete(f"/projects/{project}/policies/{policy['id']}")
        assert removed.status_code == 200 and removed.json()["id"] == policy["id"]
        assert http.get(f"/projects/{project}/policies").json()["count"] == 0
        gone = http.delete(f"/projects/{project}/policies/{policy['id']}")
        assert gone.status_code == 404 and "policies lists them" in gone.json()["detail"]


def test_policies_backtest_says_which_runs_would_stop_where_and_the_steps_saved(
    db_server: RunningServer,
) -> None:
    project = new_run_id("proj")
    with httpx.Client(base_url=db_server.url + API, timeout=30) as http:
        sick, healthy = new_run(http, project), new_run(http, project)
        for step in range(10):
            post_step(http, sick, step)
            body = {"batch_id": f"h{step}", "steps": [{"step": step, "values": {"x": 1.0}}]}
            http.post(f"/runs/{healthy}/batches", json=body).raise_for_status()
        rule = {"alert": "nonfinite", "severity": "warn", "persist_steps": 4}
        result = http.post(f"/projects/{project}/policy-backtest", json=rule).json()
        assert (result["runs"], result["count"]) == (2, 1)
        [hit] = result["data"]
        assert (hit["run_id"], hit["step"], hit["last_step"], hit["steps_saved"]) == (
            sick,
            4,
            9,
            5,
        )
        assert result["steps_saved"] == 5
        assert http.get(f"/runs/{sick}/commands").json()["count"] == 0  # nothing written
        too_long = {**rule, "persist_steps": 50}
        assert http.post(f"/projects/{project}/policy-backtest", json=too_long).json()["count"] == 0


def test_policies_refuse_a_rule_they_cannot_read(db_server: RunningServer) -> None:
    with httpx.Client(base_url=db_server.url + API, timeout=30) as http:
        for bad in (
            {"alert": "Entropy Collapse"},
            {"alert": "nonfinite", "severity": "fatal"},
            {"alert": "nonfinite", "persist_steps": -1},
            {"alert": "nonfinite", "action": "pause"},
            {"alert": "nonfinite", "dry_run": "yes"},
        ):
            answer = http.post("/projects/p/policies", json=bad)
            assert answer.status_code == 422, bad
        unknown = http.get("/projects/p/policies")  # no runs and no policies: no such project
        assert unknown.status_code == 404 and "no runs and no policies" in unknown.text
