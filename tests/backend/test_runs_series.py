"""GET /api/v1/series: several runs' series by canonical signal in one request (both DBs); its
refusals of bad parameters are tested beside /groups' (test_groups.py)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from rlguard_backend.api import series
from rlguard_backend.core.config import Settings
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


def test_runs_series_unknown_run_is_404_and_too_many_points_422(http: httpx.Client) -> None:
    known = _seed(http, ("actor/entropy",), 10)
    answer = http.get("/api/v1/series", params={"runs": f"{known},no-such", "signals": "entropy"})
    assert answer.status_code == 404 and "no-such" in answer.json()["detail"]
    for nothing in ("", ",", ",,"):
        answer = http.get("/api/v1/series", params={"runs": nothing, "signals": "entropy"})
        assert answer.status_code == 422 and "at least one run" in answer.text, answer.text
    huge = {"runs": known, "signals": "entropy", "max_points": 100_001}
    answer = http.get("/api/v1/series", params=huge)
    assert (answer.status_code, answer.json()["detail"][0]["loc"]) == (422, ["query", "max_points"])


def test_runs_series_many_series_at_the_most_points_each_are_answered(http: httpx.Client) -> None:
    """24 signals × 100,000 points of two runs (4.8 M, past the 2 M a request returns) are
    answered, each series with its share: the schema allows it, so the service takes it."""
    runs = ",".join(_seed(http, ("actor/entropy",), 10) for _ in range(2))
    every_signal = ",".join(sorted(run_fields.SIGNAL_NAMES)[:24])
    wide = {"runs": runs, "signals": every_signal, "max_points": 100_000}
    answer = http.get("/api/v1/series", params=wide)
    assert answer.status_code == 200, answer.text
    assert [r["series"]["entropy"]["steps"] for r in answer.json()["data"]] == [list(range(10))] * 2


@pytest.mark.parametrize(
    ("max_points", "series_count", "limit", "expected"),
    [
        (2000, 450, 100_000, 2000),  # 50 runs × 9 panels: within the 2 M
        (100_000, 48, 100_000, 41_666),  # 2 runs × 24 signals: 2 M ÷ 48
        (100_000, 4800, 100_000, 416),  # 200 runs × 24 signals
        (100, 4800, 100, 8),  # a small limit: never below the schema's minimum
    ],
)
def test_runs_seriespoints_per_series_share_the_request_limit(
    max_points: int, series_count: int, limit: int, expected: int
) -> None:
    settings = Settings(database_url="sqlite://", max_series_points=limit)
    assert series.points_per_series(max_points, series_count, settings) == expected
