"""GET /api/v1/series: several runs' series by canonical signal in one request (both DBs); its
refusals of bad parameters are tested beside /groups' (test_groups.py)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from rlguard_backend.store import run_fields
from tests.conftest import RunningServer, new_run_id


@pytest.fixture
def http(db_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=db_server.url, timeout=30) as client:
        yield client


def _seed(http: httpx.Client, keys: tuple[str, ...], steps: int) -> str:
    run_id = new_run_id("many")
    body = {"id": run_id, "project": "many", "config": {"lr": 0.1}, "tags": ["sweep"]}
    http.post("/api/v1/runs", json=body).raise_for_status()
    rows = [
        {"step": s, "values": {k: s * (i + 1) for i, k in enumerate(keys)}} for s in range(steps)
    ]
    rows[7]["values"]["actor/entropy"] = 1e9  # a spike the downsampling must keep
    batch = {"batch_id": "b", "steps": rows}
    http.post(f"/api/v1/runs/{run_id}/batches", json=batch).raise_for_status()
    return run_id


def test_runs_series_answers_each_run_as_its_own_reads_do(http: httpx.Client) -> None:
    """Per run, in the order asked: the run, and for each signal it logs the series of its
    first key by name, the same as ``/runs/{id}/series`` answers for that key."""
    first = _seed(http, ("policy/entropy", "actor/entropy", "actor/ppo_kl"), 500)
    second = _seed(http, ("actor/entropy",), 300)
    params = {
        "runs": f"{second},{first}",
        "signals": "entropy,ppo_kl",
        "max_points": 40,
        "smoothing": 0.5,
        "from_step": 5,
    }
    answer = http.get("/api/v1/series", params=params)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["count"] == 2 and [r["run"]["id"] for r in body["data"]] == [second, first]
    assert [r["keys"] for r in body["data"]] == [
        {"entropy": "actor/entropy"},
        {"entropy": "actor/entropy", "ppo_kl": "actor/ppo_kl"},
    ]
    for read in body["data"]:
        run_id = read["run"]["id"]
        assert read["run"] == http.get(f"/api/v1/runs/{run_id}").json()
        single = {k: v for k, v in params.items() if k not in ("runs", "signals")}
        for signal, key in read["keys"].items():
            alone = http.get(f"/api/v1/runs/{run_id}/series", params={**single, "keys": key})
            assert read["series"][signal] == alone.json()["series"][key]
            assert read["series"][signal]["downsampled"]
    assert 1e9 in body["data"][1]["series"]["entropy"]["values"]  # the spike survives


def test_runs_series_unknown_run_is_404_and_too_many_points_413(http: httpx.Client) -> None:
    known = _seed(http, ("actor/entropy",), 10)
    answer = http.get("/api/v1/series", params={"runs": f"{known},no-such", "signals": "entropy"})
    assert answer.status_code == 404 and "no-such" in answer.json()["detail"]
    for nothing in ("", ",", ",,"):
        answer = http.get("/api/v1/series", params={"runs": nothing, "signals": "entropy"})
        assert answer.status_code == 422 and "at least one run" in answer.text, answer.text
    huge = {"runs": known, "signals": "entropy", "max_points": 10**9}
    assert http.get("/api/v1/series", params=huge).status_code == 413
    # each series within the limit, but 200 runs × 24 signals × 100,000 points in all is not
    many_runs = ",".join([known, *(f"r{i}" for i in range(199))])
    every_signal = ",".join(sorted(run_fields.SIGNAL_NAMES)[:24])
    wide = {"runs": many_runs, "signals": every_signal, "max_points": 100_000}
    answer = http.get("/api/v1/series", params=wide)
    assert answer.status_code == 413 and "fewer runs or signals" in answer.json()["detail"]
