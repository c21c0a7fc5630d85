"""A run that ends closes its open alerts: out of the inbox, kept in its history."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import RunningServer, new_run_id

API = "/api/v1"


def alerting_run(http: httpx.Client) -> str:
    run_id = new_run_id("life")
    assert http.post("/runs", json={"id": run_id, "project": "life"}).status_code == 201
    steps = [{"step": s, "values": {"actor/entropy": "NaN"}} for s in range(5)]
    ack = http.post(f"/runs/{run_id}/batches", json={"batch_id": "nan", "steps": steps}).json()
    assert ack["alerts"] and ack["alerts"][0]["status"] == "open"
    return run_id


@pytest.mark.parametrize("ending", ["finished", "stopped", "failed"])
def test_alerts_close_with_their_run_and_leave_the_inbox(
    db_server: RunningServer, ending: str
) -> None:
    with httpx.Client(base_url=db_server.url + API, timeout=30) as http:
        run_id = alerting_run(http)
        still = alerting_run(http)
        assert http.patch(f"/runs/{run_id}", json={"status": ending}).status_code == 200
        [closed] = http.get(f"/runs/{run_id}/alerts").json()["data"]
        assert (closed["status"], closed["closed_with_run"]) == ("resolved", True)
        inbox = http.get("/alerts", params={"status": "open"}).json()["data"]
        assert {a["run_id"] for a in inbox} & {run_id, still} == {still}
        [kept] = http.get(f"/runs/{still}/alerts").json()["data"]
        assert kept["closed_with_run"] is False and kept["status"] == "open"
        listed = http.get("/runs", params={"project": "life", "fields": "health,alerts.critical"})
        health = {r["id"]: r["values"] for r in listed.json()["data"]}
        assert health[run_id] == {"health": "critical", "alerts.critical": 1}  # as it ended


def test_alerts_of_a_crashed_run_stay_open_and_a_resumed_run_reopens_its_own(
    db_server: RunningServer,
) -> None:
    with httpx.Client(base_url=db_server.url + API, timeout=30) as http:
        run_id = alerting_run(http)
        assert http.patch(f"/runs/{run_id}", json={"status": "crashed"}).status_code == 200
        assert http.get(f"/runs/{run_id}/alerts").json()["data"][0]["status"] == "open"
        assert http.patch(f"/runs/{run_id}", json={"status": "finished"}).status_code == 200
        assert http.get(f"/runs/{run_id}/alerts").json()["data"][0]["closed_with_run"] is True
        resumed = http.post("/runs", json={"id": run_id, "project": "life"})
        assert resumed.status_code in (200, 201) and resumed.json()["status"] == "running"
        [reopened] = http.get(f"/runs/{run_id}/alerts").json()["data"]
        assert (reopened["status"], reopened["closed_with_run"]) == ("open", False)
        steps = [{"step": s, "values": {"actor/entropy": 0.5}} for s in range(5, 40)]
        http.post(f"/runs/{run_id}/batches", json={"batch_id": "healed", "steps": steps})
        [healed] = http.get(f"/runs/{run_id}/alerts").json()["data"]
        assert healed["status"] == "resolved" and healed["closed_with_run"] is False


def test_alerts_closed_with_their_run_read_so_on_the_run_page(db_server: RunningServer) -> None:
    from rlguard_backend.schemas import AlertPublic
    from rlguard_frontend.components.alert_views import status_text

    with httpx.Client(base_url=db_server.url + API, timeout=30) as http:
        run_id = alerting_run(http)
        [opened] = http.get(f"/runs/{run_id}/alerts").json()["data"]
        http.patch(f"/runs/{run_id}", json={"status": "finished"})
        [closed] = http.get(f"/runs/{run_id}/alerts").json()["data"]
    assert status_text(AlertPublic.model_validate(opened)) == "open"
    assert status_text(AlertPublic.model_validate(closed)) == "closed with the run"
