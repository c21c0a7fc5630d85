"""The point store is one seam: every read and write of points (ingest, series, groups, rewinds,
backtests) goes through ``storage.STORE``, so another engine can take over by implementing
``PointStore``."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from rlguard_backend.store import points, storage
from tests.conftest import new_run_id

BACKEND = Path(storage.__file__).parent
VERBS = {name for name in vars(storage.PointStore) if not name.startswith("_")}


class RecordingStore:
    """A PointStore that keeps the chunked store's answers and counts each verb it serves."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def __getattr__(self, verb: str) -> Any:
        if verb not in VERBS:
            raise AttributeError(verb)

        def served(*args: Any) -> Any:
            self.calls[verb] += 1
            return getattr(points, verb)(*args)

        return served


def test_storage_only_the_store_module_calls_the_point_verbs() -> None:
    """No module reaches around the seam to ``points.<verb>``."""
    offenders = []
    for path in BACKEND.rglob("*.py"):
        if path.name in ("storage.py", "points.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            around = isinstance(node, ast.Attribute) and node.attr in VERBS
            if around and isinstance(node.value, ast.Name) and node.value.id == "points":
                offenders.append(f"{path.name}:{node.lineno}")
            if isinstance(node, ast.ImportFrom) and node.module == "rlguard_backend.store.points":
                offenders += [f"{path.name}:{node.lineno}" for a in node.names if a.name in VERBS]
    assert offenders == []


def test_storage_ingest_reads_rewinds_and_backtests_go_through_the_store(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    recording = RecordingStore()
    monkeypatch.setattr(storage, "STORE", recording)
    run_id = new_run_id("store")
    assert client.post("/api/v1/runs", json={"id": run_id, "project": "p"}).status_code == 201
    steps = [{"step": s, "values": {"loss": s / 10, "actor/entropy": 1.0}} for s in range(300)]
    steps.append({"step": 2**40, "values": {"loss": 1.0}})  # a backtest jumps the gap
    batch = client.post(f"/api/v1/runs/{run_id}/batches", json={"batch_id": "a", "steps": steps})
    assert batch.status_code == 200, batch.text
    raw = client.get(f"/api/v1/runs/{run_id}/series", params={"keys": "loss"}).json()
    assert raw["series"]["loss"]["values"][:3] == [0.0, 0.1, 0.2]
    thin = client.get(
        f"/api/v1/runs/{run_id}/series",
        params={"keys": "loss", "max_points": 20, "include_times": "true"},
    ).json()
    assert len(thin["series"]["loss"]["steps"]) <= 40
    bands = client.get("/api/v1/groups", params={"runs": run_id, "signals": "entropy"})
    assert bands.status_code == 200, bands.text
    sparse = client.post(f"/api/v1/runs/{run_id}/detect", json={"apply": False})
    assert sparse.json()["steps"] == 301
    rewound = client.post(f"/api/v1/runs/{run_id}/rewind", json={"resume_from_step": 99})
    assert rewound.status_code == 200
    detected = client.post(f"/api/v1/runs/{run_id}/detect", json={"apply": False})
    assert detected.status_code == 200
    keys = {k["name"]: k for k in client.get(f"/api/v1/runs/{run_id}/keys").json()["data"]}
    assert keys["loss"]["last_step"] == 99
    params = {"filter": f"id:eq:{run_id}", "sort": "-last.entropy", "fields": "last.entropy"}
    listed = client.get("/api/v1/runs", params=params).json()["data"]
    assert [run["values"]["last.entropy"] for run in listed] == [1.0]
    assert VERBS - set(recording.calls) == set(), recording.calls
