"""A run with sparse, huge step numbers read every way at once (backtests, series, export, rewind,
the run page's reads) while more clients than the service has threads and connections create
runs and post batches: every answer comes within a generous bound, and every write is stored
(issue #35: a backtest of such a run used to hold the write lock for good)."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from typing import Any

import httpx

from rlguard_backend.core.config import Settings
from rlguard_frontend.api_client import ApiClient
from rlguard_frontend.pages.run import data as run_page
from tests.backend.test_capacity import TIMEOUT_S, at_once, batch, post, serving
from tests.backend.test_sparse_steps import GAP, KEYS, SPARSE, sparse_batch
from tests.conftest import new_run_id

BATCHES_PER_WRITER = 3
STEPS_PER_BATCH = 10
# Small pools, and twice as many writers as they hold threads and connections together.
POOLS = {"read_threads": 4, "write_threads": 2}
WRITERS = 2 * (4 + 2 + Settings(**POOLS).db_pool_size)


def get(url: str, path: str, **params: Any) -> httpx.Response:
    return httpx.get(f"{url}/api/v1{path}", params=params, timeout=TIMEOUT_S)


def write_a_run(url: str, run_id: str) -> list[int]:
    """Create a run and post its batches; the status of each answer."""
    answers = [post(url, "/runs", {"id": run_id, "project": "writers"}).status_code]
    for b in range(BATCHES_PER_WRITER):
        steps = range(b * STEPS_PER_BATCH, (b + 1) * STEPS_PER_BATCH)
        answers.append(post(url, f"/runs/{run_id}/batches", batch(f"b{b}", steps)).status_code)
    return answers


def run_page_reads(url: str, run_id: str) -> dict[str, Any]:
    """What the dashboard's run page fetches: run, keys, markers, panels' and minis' series."""
    client = ApiClient(f"{url}/api")
    run = client.get_run(run_id)
    plan = run_page.make_plan(client, run, None)
    drawn = run_page.panel_ids(plan)
    series = run_page.read_drawn_series(client, run_id, plan, 0.6, None, drawn, "step")
    client.list_alerts(run_id)
    return {"plan": plan, "series": series}


def test_sparse_load_reads_of_a_sparse_run_answer_while_other_runs_write(db_url: str) -> None:
    sparse, rewound = new_run_id("sparse"), new_run_id("rewound")
    writers = [new_run_id("writer") for _ in range(WRITERS)]
    with serving(db_url, max_inflight_writes=10 * WRITERS, **POOLS) as (url, _app):
        for run_id in (sparse, rewound):
            assert post(url, "/runs", {"id": run_id, "project": "sparse"}).status_code == 201
            stored = post(url, f"/runs/{run_id}/batches", sparse_batch())
            assert stored.json()["points"] == len(SPARSE) * len(KEYS)
        reads: list[Callable[[], Any]] = [
            lambda: post(url, f"/runs/{sparse}/detect", {"apply": False}),
            lambda: post(url, f"/runs/{sparse}/detect", {"apply": True}),
            lambda: post(url, f"/runs/{rewound}/rewind", {"resume_from_step": GAP * 150}),
            lambda: get(url, f"/runs/{sparse}/series"),
            lambda: get(url, f"/runs/{sparse}/series", max_points=8, smoothing=0.9),
            lambda: get(url, f"/runs/{sparse}/export"),
            lambda: run_page_reads(url, sparse),
        ]
        jobs = reads + [lambda i=i: write_a_run(url, writers[i]) for i in range(WRITERS)]
        answers = at_once(len(jobs), lambda i: jobs[i]())
        backtest, applied, rewind, series, thin, export, page = answers[: len(reads)]
        assert [a.status_code for a in (backtest, applied, rewind, series, thin, export)] == [
            200
        ] * 6
        assert (backtest.json()["steps"], applied.json()["steps"]) == (len(SPARSE), len(SPARSE))
        assert {s["steps"][-1] for s in series.json()["series"].values()} == {SPARSE[-1]}
        assert {s["total_points"] for s in thin.json()["series"].values()} == {len(SPARSE)}
        rows = list(csv.reader(io.StringIO(export.text)))
        assert [int(row[0]) for row in rows[1:]] == SPARSE
        assert page["plan"]["markers"] == [
            {"step": GAP * 150, "kind": "lr_change", "label": "lr 0.0002 → 0.0001"}
        ]
        assert {s.steps[-1] for s in page["series"].values()} == {SPARSE[-1]}
        assert answers[len(reads) :] == [[201] + [200] * BATCHES_PER_WRITER] * WRITERS
        listed = get(url, "/runs", project="writers", limit=1000).json()
        assert listed["count"] == WRITERS
        for run_id in (writers[0], writers[-1]):
            keys = get(url, f"/runs/{run_id}/keys").json()["data"]
            assert [k["count"] for k in keys] == [BATCHES_PER_WRITER * STEPS_PER_BATCH] * 5
        keys = get(url, f"/runs/{rewound}/keys").json()["data"]
        assert {(k["count"], k["last_step"]) for k in keys} == {(151, GAP * 150)}
        writes = get(url, "/health").json()["writes"]
        assert (writes["in_flight"], writes["oldest_s"], writes["lock_holder"]) == (0, {}, None)
