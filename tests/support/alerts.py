"""Driving the alert API: a run created, its steps sent in batches, its alerts read back."""

from __future__ import annotations

from typing import Any

from rlguard.protocol import to_wire
from tests.detectors.scenarios import SCENARIOS

SCENARIO = {s.name: s for s in SCENARIOS}
COLLAPSE = SCENARIO["S2_early_collapse"]
HEALTHY = SCENARIO["S1_healthy"]


def wire_steps(run: list[tuple[int, dict[str, float]]]) -> list[dict[str, Any]]:
    """A run's steps as a batch body lists them (non-finite values as their wire strings)."""
    return [{"step": t, "values": {k: to_wire(v) for k, v in values.items()}} for t, values in run]


def create_run(http: Any, run_id: str, config: dict[str, Any], project: str = "alerts") -> None:
    """POST the run, asserting it is created."""
    response = http.post("/api/v1/runs", json={"id": run_id, "project": project, "config": config})
    assert response.status_code == 201, response.text


def send_batches(http: Any, run_id: str, steps: list[dict[str, Any]], size: int) -> list[dict]:
    """POST `steps` in batches of `size`; the alerts the answers say were opened."""
    opened = []
    for i in range(0, len(steps), size):
        body = {"batch_id": f"b{i}", "steps": steps[i : i + size]}
        response = http.post(f"/api/v1/runs/{run_id}/batches", json=body)
        assert response.status_code == 200, response.text
        opened.extend(response.json()["alerts"])
    return opened


def alert_view(http: Any, run_id: str) -> list[tuple[Any, ...]]:
    """The run's alerts as sorted tuples of what a user sees of each."""
    data = http.get(f"/api/v1/runs/{run_id}/alerts").json()["data"]
    return sorted(
        (
            a["detector"],
            a["key"],
            a["severity"],
            a["status"],
            a["first_step"],
            a["last_step"],
            a["secondary"],
        )
        for a in data
    )
