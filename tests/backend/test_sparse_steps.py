"""Sparse, huge step numbers (tokens seen, millisecond timestamps): every read of a run walks what
is stored, never the step-number range. Steps 0, 2^40·k and 2^62 (the largest the wire allows)."""

from __future__ import annotations

import csv
import io
from collections import Counter
from typing import Any

import pytest
from fastapi.testclient import TestClient

from rlguard.protocol import MAX_STEP
from rlguard_backend.core import migrate
from rlguard_backend.core.app import create_app
from rlguard_backend.core.config import Settings
from rlguard_backend.core.db import make_engine, make_session_factory
from rlguard_backend.detection import feed
from rlguard_backend.store import points, storage
from tests.conftest import new_run_id

GAP = 2**40
SPARSE = [0, *(GAP * k for k in range(1, 301)), MAX_STEP]
KEYS = ("actor/ppo_kl", "actor/entropy", "actor/lr")
TOKENS = 2**20  # steps that count tokens seen


def sparse_batch(batch_id: str = "sparse") -> dict[str, Any]:
    """Every step of SPARSE with the three keys; the learning rate halves at 2^40·150."""
    steps = []
    for step in SPARSE:
        lr = 1e-4 if step >= GAP * 150 else 2e-4
        values = {"actor/ppo_kl": 0.01, "actor/entropy": 1.0, "actor/lr": lr}
        steps.append({"step": step, "values": values})
    return {"batch_id": batch_id, "steps": steps}


def token_batch(count: int) -> dict[str, Any]:
    """``count`` steps counting tokens (TOKENS apart), two keys each."""
    steps = [{"step": k * TOKENS, "values": {"loss": 1.0, "kl": 0.1}} for k in range(count)]
    return {"batch_id": f"tokens-{count}", "steps": steps}


class CountingStore:
    """The chunked store, with each verb it serves counted: the work a request did."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def __getattr__(self, verb: str) -> Any:
        def served(*args: Any) -> Any:
            self.calls[verb] += 1
            return getattr(points, verb)(*args)

        return served


@pytest.fixture
def sparse_run(client: TestClient) -> str:
    run_id = new_run_id("sparse")
    assert client.post("/api/v1/runs", json={"id": run_id, "project": "p"}).status_code == 201
    stored = client.post(f"/api/v1/runs/{run_id}/batches", json=sparse_batch())
    assert stored.status_code == 200, stored.text
    assert stored.json()["points"] == len(SPARSE) * len(KEYS)
    return run_id


def test_sparse_steps_backtest_reads_by_stored_points_not_step_numbers(
    client: TestClient, sparse_run: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    counting = CountingStore()
    monkeypatch.setattr(storage, "STORE", counting)
    answer = client.post(f"/api/v1/runs/{sparse_run}/detect", json={"apply": False})
    assert answer.status_code == 200, answer.text
    assert answer.json()["steps"] == len(SPARSE)
    # 302 points per key fit one window: one read of each key, whatever the gaps.
    assert counting.calls == Counter({"read_first": len(KEYS)})


def test_sparse_steps_token_count_steps_are_read_in_windows_of_points(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Steps counting tokens: 12,000 of them are read in three windows of 5,000 points."""
    run_id = new_run_id("tokens")
    client.post("/api/v1/runs", json={"id": run_id, "project": "p"})
    stored = client.post(f"/api/v1/runs/{run_id}/batches", json=token_batch(12_000))
    assert stored.status_code == 200, stored.text
    counting = CountingStore()
    monkeypatch.setattr(storage, "STORE", counting)
    answer = client.post(f"/api/v1/runs/{run_id}/detect", json={"apply": False})
    assert answer.json()["steps"] == 12_000
    assert counting.calls == Counter({"read_first": 3 * 2})


def test_sparse_steps_stored_chunks_are_the_stored_steps_in_order(
    app: Any, sparse_run: str
) -> None:
    with app.state.session_factory() as session:
        chunks = list(feed.stored_chunks(session, sparse_run))
        assert [step for chunk in chunks for step, _ in chunk] == SPARSE
        assert all(len(values) == len(KEYS) for chunk in chunks for _, values in chunk)
        ranged = list(feed.stored_chunks(session, sparse_run, GAP * 10, GAP * 20))
        assert [step for chunk in ranged for step, _ in chunk] == [GAP * k for k in range(10, 21)]
        assert list(feed.stored_chunks(session, sparse_run, GAP * 300 + 1, MAX_STEP - 1)) == []


def test_sparse_steps_backtest_of_a_step_range(client: TestClient, sparse_run: str) -> None:
    body = {"from_step": GAP * 100, "to_step": GAP * 199}
    answer = client.post(f"/api/v1/runs/{sparse_run}/detect", json=body)
    assert answer.status_code == 200, answer.text
    assert (answer.json()["steps"], answer.json()["applied"]) == (100, False)


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"apply": True, "to_step": GAP}, 409, "drop from_step and to_step"),
        ({"to_step": MAX_STEP + 1}, 422, "less than or equal to"),
    ],
)
def test_sparse_steps_backtest_range_refused_with_the_fix(
    client: TestClient, sparse_run: str, body: dict[str, Any], status: int, says: str
) -> None:
    answer = client.post(f"/api/v1/runs/{sparse_run}/detect", json=body)
    assert answer.status_code == status
    assert says in str(answer.json()["detail"])


def test_sparse_steps_backtest_of_a_range_ending_before_it_starts_replays_nothing(
    client: TestClient, sparse_run: str
) -> None:
    answer = client.post(f"/api/v1/runs/{sparse_run}/detect", json={"from_step": GAP, "to_step": 0})
    assert answer.status_code == 200, answer.text
    assert (answer.json()["steps"], answer.json()["alerts"]) == (0, [])


def test_sparse_steps_backtest_past_its_limit_is_cancelled_naming_a_range(
    sqlite_url: str,
) -> None:
    app = create_app(Settings(database_url=sqlite_url, backtest_timeout_s=1e-9))
    with TestClient(app) as client:
        run_id = new_run_id("slow")
        client.post("/api/v1/runs", json={"id": run_id, "project": "p"})
        client.post(f"/api/v1/runs/{run_id}/batches", json=token_batch(12_000))
        answer = client.post(f"/api/v1/runs/{run_id}/detect", json={"apply": True})
        assert answer.status_code == 413
        detail = answer.json()["detail"]
        assert "RLGUARD_BACKTEST_TIMEOUT_S" in detail
        # Cancelled before its second window of 5,000 points: steps before it are done.
        done, last = 5000 * TOKENS - 1, 11_999 * TOKENS
        assert f"cancelled at step {done} of 0..{last}" in detail
        assert f'{{"from_step": 0, "to_step": {done}}} then {{"from_step": {done + 1}}}' in detail
        body = {"from_step": 1000 * TOKENS}
        ranged = client.post(f"/api/v1/runs/{run_id}/detect", json=body)
        assert ranged.status_code == 413
        expected = f'{{"from_step": {1000 * TOKENS}, "to_step": {6000 * TOKENS - 1}}}'
        assert expected in ranged.json()["detail"]
        health = client.get("/api/v1/health").json()["writes"]
        assert (health["in_flight"], health["oldest_s"]) == (0, {})
    app.state.engine.dispose()


def test_sparse_steps_applied_backtest_and_rewind(client: TestClient, sparse_run: str) -> None:
    applied = client.post(f"/api/v1/runs/{sparse_run}/detect", json={"apply": True})
    assert (applied.json()["steps"], applied.json()["applied"]) == (len(SPARSE), True)
    rewound = client.post(f"/api/v1/runs/{sparse_run}/rewind", json={"resume_from_step": GAP * 150})
    assert rewound.status_code == 200, rewound.text
    keys = client.get(f"/api/v1/runs/{sparse_run}/keys").json()["data"]
    assert {(k["count"], k["last_step"]) for k in keys} == {(151, GAP * 150)}
    again = client.post(f"/api/v1/runs/{sparse_run}/detect", json={})
    assert again.json()["steps"] == 151
    resumed = client.post(
        "/api/v1/runs", json={"id": sparse_run, "project": "p", "resume_from_step": GAP * 10}
    )
    assert resumed.status_code == 200, resumed.text
    assert client.post(f"/api/v1/runs/{sparse_run}/detect", json={}).json()["steps"] == 11


def test_sparse_steps_series_export_markers_and_groups(client: TestClient, sparse_run: str) -> None:
    base = f"/api/v1/runs/{sparse_run}"
    raw = client.get(f"{base}/series", params={"keys": "actor/entropy"}).json()
    assert raw["series"]["actor/entropy"]["steps"] == SPARSE
    thin = client.get(f"{base}/series", params={"keys": "actor/entropy", "max_points": 8}).json()
    series = thin["series"]["actor/entropy"]
    assert (series["downsampled"], series["total_points"]) == (True, len(SPARSE))
    assert len(series["steps"]) <= 8 and series["steps"][-1] == MAX_STEP
    smoothed = client.get(
        f"{base}/series",
        params={"keys": "actor/entropy", "max_points": 8, "smoothing": 0.5},
    ).json()
    assert smoothed["series"]["actor/entropy"]["total_points"] == len(SPARSE)
    live = client.get(f"{base}/series", params={"after_step": GAP * 300}).json()
    assert {name: s["steps"] for name, s in live["series"].items()} == {k: [MAX_STEP] for k in KEYS}
    rows = list(csv.reader(io.StringIO(client.get(f"{base}/export").text)))
    assert rows[0] == ["step", *sorted(KEYS)] and [int(r[0]) for r in rows[1:]] == SPARSE
    found = client.get(f"{base}/markers").json()["data"]
    assert [(m["step"], m["kind"]) for m in found] == [(GAP * 150, "lr_change")]
    bands = client.get(
        "/api/v1/groups", params={"runs": sparse_run, "signals": "entropy", "bins": 5000}
    ).json()
    band = bands["data"][0]["signals"]["entropy"]
    assert bands["bins"] == 5000 and sum(band["n"]) == len(band["steps"]) > 0
    assert set(band["mean"]) == {1.0}


def test_sparse_steps_rewrite_of_stored_steps_rebuilds_their_rollups(
    client: TestClient, sparse_run: str
) -> None:
    base = f"/api/v1/runs/{sparse_run}"
    rewrite = [{"step": s, "values": {"actor/entropy": 5.0}} for s in (0, GAP * 5, MAX_STEP)]
    stored = client.post(f"{base}/batches", json={"batch_id": "rewrite", "steps": rewrite})
    assert stored.status_code == 200, stored.text
    raw = client.get(f"{base}/series", params={"keys": "actor/entropy"}).json()
    values = dict(
        zip(
            raw["series"]["actor/entropy"]["steps"],
            raw["series"]["actor/entropy"]["values"],
            strict=True,
        )
    )
    assert (len(values), values[0], values[GAP * 5], values[GAP * 6], values[MAX_STEP]) == (
        len(SPARSE),
        5.0,
        5.0,
        1.0,
        5.0,
    )
    thin = client.get(f"{base}/series", params={"keys": "actor/entropy", "max_points": 8}).json()
    series = thin["series"]["actor/entropy"]
    assert (series["total_points"], max(series["max"]), min(series["min"])) == (
        len(SPARSE),
        5.0,
        1.0,
    )


def test_sparse_steps_samples_at_huge_steps(client: TestClient, sparse_run: str) -> None:
    base = f"/api/v1/runs/{sparse_run}"
    rollouts = [
        {"step": step, "index": 0, "prompt": "p", "response": "r", "reward": 1.0}
        for step in (0, GAP * 300, MAX_STEP)
    ]
    stored = client.post(f"{base}/samples", json={"batch_id": "s", "samples": rollouts})
    assert stored.status_code == 200, stored.text
    steps = client.get(f"{base}/sample-steps").json()["data"]
    assert [(s["step"], s["samples"]) for s in steps] == [(0, 1), (GAP * 300, 1), (MAX_STEP, 1)]
    found = client.get(f"{base}/samples", params={"from_step": GAP, "order": "desc"}).json()
    assert [s["step"] for s in found["data"]] == [MAX_STEP, GAP * 300]


def test_sparse_steps_two_steps_far_apart_backtest(client: TestClient) -> None:
    """The fuzzed run of the issue: steps 0 and about 1.5 × 10^15."""
    run_id = new_run_id("fuzzed")
    client.post("/api/v1/runs", json={"id": run_id, "project": "p"})
    steps = [{"step": s, "values": {"actor/entropy": 1.0}} for s in (0, 1_500_000_000_000_000)]
    client.post(f"/api/v1/runs/{run_id}/batches", json={"batch_id": "f", "steps": steps})
    answer = client.post(f"/api/v1/runs/{run_id}/detect", json={"apply": True})
    assert (answer.status_code, answer.json()["steps"]) == (200, 2)


def test_sparse_steps_read_first_pages_through_many_small_chunks(db_url: str) -> None:
    """Chunks of one point each (as gap fills leave them): pages of chunks, each point once."""
    engine = make_engine(db_url)
    migrate.upgrade(engine)
    key_id, steps = 7, [k * GAP for k in range(3 * points.READ_FIRST_PAGE_CHUNKS)]
    try:
        with make_session_factory(engine)() as session:
            for step in steps:
                column = points.Columns([step], [float(step % 5)], [0.0])
                points.store_points(session, {key_id: column}, {key_id: points.KeyTail(None)})
            session.commit()
            read = points.read_first(session, key_id, 0, MAX_STEP, len(steps))
            assert [row[0] for row in read] == steps
            middle = points.read_first(session, key_id, GAP * 70 + 1, GAP * 150, 1000)
            assert [row[0] for row in middle] == steps[71:151]
            assert [row[0] for row in points.read_first(session, key_id, 0, MAX_STEP, 100)] == (
                steps[:100]
            )
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    "thresholds",
    [
        {"common.half_life_entropy": 0},  # divided by: was a 500
        {"kl_spike.history_points": 0},  # indexed: was a 500
        {"kl_spike.grad_repeat": 10**30},  # a window without end: was a 500
    ],
)
def test_detect_refuses_thresholds_out_of_bounds_naming_them(
    client: TestClient, thresholds: dict
) -> None:
    run_id = new_run_id("bounds")
    client.post("/api/v1/runs", json={"id": run_id, "project": "p"})
    steps = [{"step": s, "values": {"actor/entropy": 1.0}} for s in range(5)]
    client.post(f"/api/v1/runs/{run_id}/batches", json={"batch_id": "b", "steps": steps})
    answer = client.post(f"/api/v1/runs/{run_id}/detect", json={"thresholds": thresholds})
    assert answer.status_code == 422
    [name] = thresholds
    assert name in answer.json()["detail"][0]["msg"]
