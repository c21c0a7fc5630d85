"""Drop reports (a trainer's heartbeat saying what it dropped undelivered) are idempotent: sent
twice, late or by several processes of one run, the run's totals count each process once."""

from __future__ import annotations

from typing import Any

import httpx

from rlguard.protocol import MAX_STEP
from rlguard_backend.schemas import ClientDrops
from rlguard_backend.store.repository import EARLIER_REPORTERS, MAX_DROP_REPORTERS, merge_drops
from tests.conftest import RunningServer, new_run_id


def _report(process: str, points: int, samples: int = 0) -> dict[str, Any]:
    return {"drops": {"process": process, "points": points, "steps": 0, "samples": samples}}


def test_drop_reports_twice_late_and_from_two_processes_count_each_process_once(
    server: RunningServer,
) -> None:
    run_id = new_run_id("drops")
    with httpx.Client(base_url=f"{server.url}/api/v1", timeout=30) as http:
        assert http.post("/runs", json={"id": run_id, "project": "p"}).status_code == 201
        beats = [_report("a", 10, 4), _report("a", 10, 4), _report("b", 7), _report("a", 3)]
        for beat in beats:  # the last is an older report of "a" arriving late
            assert http.post(f"/runs/{run_id}/heartbeat", json=beat).status_code == 200
        assert http.post(f"/runs/{run_id}/heartbeat", json={}).status_code == 200
        dropped = http.get(f"/runs/{run_id}").json()["dropped"]
        assert dropped == {"points": 17, "steps": 0, "samples": 4}
        refused = http.post(f"/runs/{run_id}/heartbeat", json=_report("../x", -1))
        assert refused.status_code == 422
        assert {tuple(e["loc"][-1:]) for e in refused.json()["detail"]} == {
            ("process",),
            ("points",),
        }


def test_drop_reports_past_the_reporter_limit_fold_the_oldest_into_earlier() -> None:
    reports: dict[str, Any] = {}
    for i in range(MAX_DROP_REPORTERS + 3):
        reports = merge_drops(reports, ClientDrops(process=f"p{i}", points=1))
    assert len(reports) == MAX_DROP_REPORTERS + 1
    assert reports[EARLIER_REPORTERS] == {"points": 3, "steps": 0, "samples": 0}
    assert sum(r["points"] for r in reports.values()) == MAX_DROP_REPORTERS + 3


def test_drop_reports_whose_sum_passes_the_wire_bound_saturate_at_it(server: RunningServer) -> None:
    """Each process may report up to 2**62; their total is shown at the bound, not a 500."""
    run_id = new_run_id("drops")
    with httpx.Client(base_url=f"{server.url}/api/v1", timeout=30) as http:
        assert http.post("/runs", json={"id": run_id, "project": "p"}).status_code == 201
        for process in ("a", "b"):
            beat = _report(process, MAX_STEP)
            assert http.post(f"/runs/{run_id}/heartbeat", json=beat).status_code == 200
        answer = http.get(f"/runs/{run_id}")
        assert answer.status_code == 200
        assert answer.json()["dropped"]["points"] == MAX_STEP
