"""Sorting, filtering and widening GET /api/v1/runs by fields, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from rlguard_backend.core.db import write_session
from rlguard_backend.models import Alert
from tests.conftest import RunningServer, new_run_id

CONFIGS = [
    {"lr": 1e-6, "kl_coef": 0.01, "kl_placement": "loss", "algorithm": {"kl_ctrl": {"target": 6}}},
    {"learning_rate": 3e-6, "beta": 0.04, "kl_placement": "reward", "seed": 1},
    {"actor_rollout_ref.actor.optim.lr": 2e-6, "kl_placement": "loss", "flag": True},
    {"lr": "warmup", "name": "<img src=x onerror=alert(1)>"},
]
REWARDS = [0.5, 0.9, 0.1, None]


@pytest.fixture
def http(db_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=db_server.url, timeout=30) as client:
        yield client


@pytest.fixture
def runs(http: httpx.Client, db_server: RunningServer) -> list[str]:
    """Four runs of one project: configs above, a last reward each (but the last), alerts."""
    project = new_run_id("fields")
    ids = [new_run_id("f") for _ in CONFIGS]
    for run_id, config, reward in zip(ids, CONFIGS, REWARDS, strict=True):
        body = {"id": run_id, "project": project, "config": config}
        http.post("/api/v1/runs", json=body).raise_for_status()
        if reward is not None:
            steps = [
                {"step": s, "values": {"critic/score/mean": reward - (99 - s)}} for s in range(100)
            ]
            batch = {"batch_id": "b", "steps": steps}
            http.post(f"/api/v1/runs/{run_id}/batches", json=batch).raise_for_status()
    with write_session(db_server.session_factory) as session:
        for run_id, severity in ((ids[0], "warn"), (ids[1], "critical"), (ids[1], "warn")):
            session.add(
                Alert(
                    run_id=run_id,
                    detector=f"test-{severity}",
                    severity=severity,
                    first_step=1,
                    last_step=2,
                    message="m",
                )
            )
        session.commit()
    return ids


def _list(http: httpx.Client, project: str, **params: Any) -> dict[str, Any]:
    answer = http.get("/api/v1/runs", params={"project": project, **params})
    assert answer.status_code == 200, answer.text
    return answer.json()


def _project(http: httpx.Client, run_id: str) -> str:
    return str(http.get(f"/api/v1/runs/{run_id}").json()["project"])


def test_list_runs_sorts_by_last_signal_value_with_missing_last(
    http: httpx.Client, runs: list[str]
) -> None:
    project = _project(http, runs[0])
    answer = _list(http, project, sort="-last.reward_mean", fields="last.reward_mean")
    assert [r["id"] for r in answer["data"]] == [runs[1], runs[0], runs[2], runs[3]]
    assert [r["values"]["last.reward_mean"] for r in answer["data"]] == [0.9, 0.5, 0.1, None]
    ascending = _list(http, project, sort="last.reward_mean")
    assert [r["id"] for r in ascending["data"]] == [runs[2], runs[0], runs[1], runs[3]]


def test_list_runs_hparam_reads_each_frameworks_config_name(
    http: httpx.Client, runs: list[str]
) -> None:
    project = _project(http, runs[0])
    answer = _list(http, project, sort="hparam.lr", fields="hparam.lr,hparam.kl_coef")
    assert [r["id"] for r in answer["data"]] == [runs[0], runs[2], runs[1], runs[3]]
    values = {r["id"]: r["values"] for r in answer["data"]}
    assert values[runs[1]] == {"hparam.lr": 3e-6, "hparam.kl_coef": 0.04}
    assert values[runs[2]]["hparam.lr"] == 2e-6  # a flat verl key holding dots
    assert values[runs[3]] == {"hparam.lr": "warmup", "hparam.kl_coef": None}


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        (["config.kl_placement:eq:loss"], [0, 2]),
        (["config.kl_placement:ne:loss"], [1, 3]),
        (["hparam.lr:lt:2.5e-6"], [0, 2]),
        (["hparam.lr:ge:2e-6", "config.kl_placement:eq:loss"], [2]),
        (["config.algorithm.kl_ctrl.target:eq:6"], [0]),
        (["config.name:contains:ONERROR"], [3]),
        (["config.flag:eq:true"], [2]),
        (["config.seed:blank"], [0, 2, 3]),
        (["last.reward_mean:notblank", "last.reward_mean:gt:0.2"], [0, 1]),
        (["health:eq:critical"], [1]),
        (["alerts.warn:eq:1"], [0, 1]),
        (["alerts.open:eq:0"], [2, 3]),
        (["id:startswith:f-"], [0, 1, 2, 3]),
    ],
)
def test_list_runs_filters_count_every_match(
    http: httpx.Client, runs: list[str], filters: list[str], expected: list[int]
) -> None:
    project = _project(http, runs[0])
    answer = _list(http, project, filter=filters, sort="created_at", limit=1)
    assert answer["count"] == len(expected)
    every = _list(http, project, filter=filters, sort="created_at")
    assert [r["id"] for r in every["data"]] == [runs[i] for i in expected]


def test_list_runs_health_sorts_worst_first_descending(http: httpx.Client, runs: list[str]) -> None:
    project = _project(http, runs[0])
    answer = _list(http, project, sort="-health,created_at", fields="health,alerts.open")
    assert [r["id"] for r in answer["data"]] == [runs[1], runs[0], runs[2], runs[3]]
    assert [r["values"]["health"] for r in answer["data"]] == ["critical", "warn", "ok", "ok"]
    assert [r["values"]["alerts.open"] for r in answer["data"]] == [2, 1, 0, 0]


@pytest.mark.parametrize(
    ("params", "parameter", "words"),
    [
        ({"sort": "colour"}, "sort", "unknown field"),
        ({"sort": "last.rewardz"}, "sort", "unknown signal"),
        ({"sort": "a,b,c,d,e"}, "sort", "at most 4"),
        ({"filter": "config.lr"}, "filter", "<field>:<op>"),
        ({"filter": "config.lr:gt"}, "filter", "needs a value"),
        ({"filter": "config.lr:gt:fast"}, "filter", "with a number"),
        ({"filter": "name:gt:3"}, "filter", "does not fit"),
        ({"filter": "last_step:contains:3"}, "filter", "does not fit"),
        ({"filter": 'config.a"b:eq:1'}, "filter", "double quotes"),
        ({"fields": "hparam.momentum"}, "fields", "unknown hparam"),
    ],
)
def test_list_runs_bad_field_parameters_are_422_naming_them(
    http: httpx.Client, params: dict[str, str], parameter: str, words: str
) -> None:
    answer = http.get("/api/v1/runs", params=params)
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"][0]
    assert detail["loc"] == ["query", parameter]
    assert words in detail["msg"]


def test_run_fields_lists_flattened_keys_and_logged_signals(
    http: httpx.Client, runs: list[str]
) -> None:
    project = _project(http, runs[0])
    answer = http.get("/api/v1/run-fields", params={"project": project})
    assert answer.status_code == 200
    fields = {f["name"]: f for f in answer.json()["data"]}
    assert fields["config.kl_placement"]["runs"] == 3
    assert fields["config.algorithm.kl_ctrl.target"]["kind"] == "number"
    assert fields["last.reward_mean"]["runs"] == 3
    assert {"health", "alerts.open", "hparam.lr", "last_step"} <= fields.keys()
    assert "last.entropy" not in fields
