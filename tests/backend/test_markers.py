"""Markers: learning-rate changes (pure) and GET /runs/{id}/markers on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from rlguard_backend.store.markers import lr_changes
from tests.conftest import RunningServer, new_run_id


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([3e-4] * 5, []),  # constant
        ([3e-4, 3e-4, 1e-4, 1e-4, 3e-5], [(2, 3e-4, 1e-4), (4, 1e-4, 3e-5)]),  # step decay
        ([0.0, 1e-5, 2e-5, 3e-5, 3e-5], [(1, 0.0, 1e-5)]),  # warm-up: marked where it starts
        ([1.0, 0.995, 0.99, 0.985, 0.98], []),  # a smooth schedule: no marker
        ([1.0, None, 0.5], [(2, 1.0, 0.5)]),  # a missing value is skipped
    ],
)
def test_lr_changes_marks_jumps_after_steady_steps(
    values: list[float | None], expected: list[tuple[int, float, float]]
) -> None:
    assert lr_changes(list(enumerate(values))) == expected


@pytest.fixture
def http(db_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=db_server.url, timeout=30) as client:
        yield client


def test_markers_list_restarts_rewinds_and_lr_changes_in_step_order(http: httpx.Client) -> None:
    run_id = new_run_id("marks")
    body = {"id": run_id, "project": "marks"}
    http.post("/api/v1/runs", json=body).raise_for_status()
    steps = [{"step": s, "values": {"actor/lr": 1e-3 if s < 50 else 1e-4}} for s in range(100)]
    http.post(f"/api/v1/runs/{run_id}/batches", json={"batch_id": "a", "steps": steps})
    http.post(f"/api/v1/runs/{run_id}/rewind", json={"resume_from_step": 80}).raise_for_status()
    assert http.post("/api/v1/runs", json=body).status_code == 200  # a new process resumes
    answer = http.get(f"/api/v1/runs/{run_id}/markers")
    assert answer.status_code == 200
    assert answer.json()["data"] == [
        {"step": 50, "kind": "lr_change", "label": "lr 0.001 → 0.0001"},
        {"step": 80, "kind": "restart", "label": "restart"},
        {"step": 80, "kind": "rewind", "label": "rewind"},
    ]


def test_markers_of_unknown_run_is_404(http: httpx.Client) -> None:
    answer = http.get("/api/v1/runs/no-such-run/markers")
    assert answer.status_code == 404
