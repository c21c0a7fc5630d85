"""Series queries: cursors, ranges, spike-preserving downsampling checked by brute force."""

from __future__ import annotations

import math
import random

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from rlguard_backend import ingest
from rlguard_backend.core import migrate
from rlguard_backend.core.db import make_engine, make_session_factory, write_session
from rlguard_backend.schemas import BatchIn, RunCreate
from rlguard_backend.store import repository
from rlguard_backend.store.points import cover
from rlguard_backend.store.rollups import BUCKET_WIDTHS, summarize
from rlguard_backend.store.series import read_series
from tests.conftest import new_run_id


def _store(factory, run_id: str, series: dict[int, float], batch: str, chunk: int = 5000) -> None:  # type: ignore[no-untyped-def]
    items = sorted(series.items())
    for start in range(0, len(items), chunk):
        steps = [{"step": s, "values": {"x": v}} for s, v in items[start : start + chunk]]
        with write_session(factory) as session:
            ingest.ingest_batch(
                session,
                run_id,
                BatchIn.model_validate({"batch_id": f"{batch}-{start}", "steps": steps}),
            )
            session.commit()


def _new_run(factory) -> str:  # type: ignore[no-untyped-def]
    run_id = new_run_id()
    with write_session(factory) as session:
        repository.create_or_resume_run(session, RunCreate(id=run_id, project="p"))
        session.commit()
    return run_id


def _key(session: Session, run_id: str):  # type: ignore[no-untyped-def]
    return repository.run_keys(session, run_id)[0]


def _as_float(value: object) -> float:
    return float(value)  # type: ignore[arg-type]


def test_series_live_cursor_returns_only_new_steps(client: TestClient) -> None:
    run_id = new_run_id()
    client.post("/api/v1/runs", json={"id": run_id, "project": "p"})
    steps = [{"step": s, "values": {"a": float(s), "b": -float(s)}} for s in range(30)]
    client.post(f"/api/v1/runs/{run_id}/batches", json={"batch_id": "1", "steps": steps})
    response = client.get(
        f"/api/v1/runs/{run_id}/series", params={"keys": "a,b", "after_step": 27}
    ).json()
    assert response["series"]["a"]["steps"] == [28, 29]
    assert response["series"]["b"]["values"] == [-28.0, -29.0]
    assert response["series"]["a"]["last_step"] == 29
    empty = client.get(f"/api/v1/runs/{run_id}/series", params={"keys": "a", "after_step": 29})
    assert empty.json()["series"]["a"]["steps"] == []
    ranged = client.get(
        f"/api/v1/runs/{run_id}/series", params={"keys": "a", "from_step": 5, "to_step": 7}
    ).json()["series"]["a"]
    assert (ranged["steps"], ranged["downsampled"], ranged["method"]) == ([5, 6, 7], False, "raw")


def test_series_unknown_key_is_listed_missing_and_bad_params_422(client: TestClient) -> None:
    run_id = new_run_id()
    client.post("/api/v1/runs", json={"id": run_id, "project": "p"})
    batch = {"batch_id": "b", "steps": [{"step": 1, "values": {"seen": 1.0}}]}
    client.post(f"/api/v1/runs/{run_id}/batches", json=batch)
    answer = client.get(f"/api/v1/runs/{run_id}/series", params={"keys": "seen,nope"}).json()
    assert (list(answer["series"]), answer["missing"]) == (["seen"], ["nope"])
    bad = client.get(f"/api/v1/runs/{run_id}/series", params={"max_points": 2})
    assert (bad.status_code, bad.json()["detail"][0]["loc"]) == (422, ["query", "max_points"])
    huge = client.get(f"/api/v1/runs/{run_id}/series", params={"max_points": 100_001})
    assert (huge.status_code, huge.json()["detail"][0]["loc"]) == (422, ["query", "max_points"])
    assert "RLGUARD_MAX_SERIES_POINTS" in huge.text
    assert client.get("/api/v1/runs/ghost/series").status_code == 404


def test_series_downsampling_keeps_one_step_spike(client: TestClient) -> None:
    factory = client.app.state.session_factory  # type: ignore[attr-defined]
    run_id = _new_run(factory)
    rng = random.Random(7)
    series = {s: rng.gauss(0.0, 1.0) for s in range(120_000)}
    series[113_457] = 1e6
    series[77_777] = -1e6
    series[100_001] = math.nan
    _store(factory, run_id, series, "spike", chunk=20_000)
    response = client.get(
        f"/api/v1/runs/{run_id}/series", params={"keys": "x", "max_points": 2000}
    ).json()["series"]["x"]
    assert response["downsampled"] is True and response["method"] == "minmax"
    assert len(response["steps"]) <= 2000
    assert response["total_points"] == 120_000
    drawn = dict(zip(response["steps"], response["values"], strict=True))
    assert drawn[113_457] == 1e6 and drawn[77_777] == -1e6 and drawn[100_001] == "NaN"
    assert max(_as_float(v) for v in response["max"] if v != "NaN") == 1e6
    assert response["steps"] == sorted(response["steps"])


def _brute(series: dict[int, float | None], lo: int, hi: int):  # type: ignore[no-untyped-def]
    return summarize((s, v) for s, v in sorted(series.items()) if lo <= s <= hi)


@pytest.mark.parametrize("seed", range(3))
def test_rollups_match_brute_force_after_overwrites_and_rewinds(db_url: str, seed: int) -> None:
    engine = make_engine(db_url)
    migrate.upgrade(engine)
    factory = make_session_factory(engine)
    run_id = _new_run(factory)
    rng = random.Random(seed)
    truth: dict[int, float | None] = {}
    for round_ in range(6):
        start = rng.randrange(0, 40_000)
        steps = {
            s: rng.choice([rng.gauss(0, 1), math.inf, -math.inf, math.nan])
            if rng.random() < 0.01
            else rng.gauss(0, 1)
            for s in range(start, start + rng.randrange(1, 6000), rng.choice([1, 1, 3]))
        }
        _store(factory, run_id, steps, f"r{round_}", chunk=rng.choice([100, 2500]))
        truth.update({s: None if math.isnan(v) else v for s, v in steps.items()})
        if round_ == 3:
            cut = rng.randrange(0, max(truth))
            with write_session(factory) as session:
                repository.rewind_run(session, repository.get_run(session, run_id), cut)
                session.commit()
            truth = {s: v for s, v in truth.items() if s <= cut}
    with factory() as session:
        key = _key(session, run_id)
        for _ in range(25):
            lo = rng.randrange(0, 50_000)
            hi = lo + rng.randrange(0, 30_000)
            expected = _brute(truth, lo, hi)
            for level in range(-1, len(BUCKET_WIDTHS)):
                parts = cover(session, key.id, lo, hi, level)
                got = summarize(()) if not parts else parts[0]
                for part in parts[1:]:
                    assert got is not None
                    got.merge(part)
                if expected is None:
                    assert got is None
                else:
                    assert got is not None
                    assert got.as_row() == expected.as_row(), (lo, hi, level)
        data = read_series(session, key, 0, None, 500)
        assert len(data.steps) <= 500
        assert data.total_points == len(truth)
    engine.dispose()


def test_series_smoothing_is_debiased_ema_and_keeps_raw(client: TestClient) -> None:
    run_id = new_run_id()
    client.post("/api/v1/runs", json={"id": run_id, "project": "p"})
    values = [1.0, 3.0, "NaN", 5.0]
    steps = [{"step": s, "values": {"x": v}} for s, v in enumerate(values)]
    client.post(f"/api/v1/runs/{run_id}/batches", json={"batch_id": "1", "steps": steps})
    data = client.get(
        f"/api/v1/runs/{run_id}/series", params={"keys": "x", "smoothing": 0.5}
    ).json()["series"]["x"]
    assert data["values"] == values
    second = (0.25 * 1.0 + 0.5 * 3.0) / (1 - 0.25)
    third = (0.5 * (0.25 * 1.0 + 0.5 * 3.0) + 0.5 * 5.0) / (1 - 0.125)
    assert data["smoothed"][0] == 1.0
    assert math.isclose(data["smoothed"][1], second)
    assert data["smoothed"][2] == "NaN"
    assert math.isclose(data["smoothed"][3], third)
    bad = client.get(f"/api/v1/runs/{run_id}/series", params={"keys": "x", "smoothing": 1.0})
    assert (bad.status_code, bad.json()["detail"][0]["loc"]) == (422, ["query", "smoothing"])


def test_series_downsampled_smoothing_and_times(client: TestClient) -> None:
    run_id = new_run_id()
    client.post("/api/v1/runs", json={"id": run_id, "project": "p"})
    steps = [{"step": s, "time": 1000.0 + s, "values": {"x": float(s % 7)}} for s in range(3000)]
    client.post(f"/api/v1/runs/{run_id}/batches", json={"batch_id": "1", "steps": steps})
    base = f"/api/v1/runs/{run_id}/series"
    timed = client.get(base, params={"keys": "x", "max_points": 200, "include_times": True})
    data = timed.json()["series"]["x"]
    assert data["downsampled"] and data["times"] == [1000.0 + s for s in data["steps"]]
    smooth = client.get(base, params={"keys": "x", "max_points": 200, "smoothing": 0.9}).json()
    sdata = smooth["series"]["x"]
    assert sdata["downsampled"] and len(sdata["smoothed"]) == len(sdata["steps"]) <= 200
    assert all(0.0 <= v <= 6.0 for v in sdata["smoothed"])
