"""Samples over the API on both databases: ingest, idempotency, refusals, reads, retention."""

from __future__ import annotations

import concurrent.futures
import gzip
import json
import urllib.request

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from rlguard_backend.models import Alert, utcnow
from tests.conftest import RunningServer, new_run_id


def _create_run(client: TestClient, config: dict | None = None) -> str:
    run = new_run_id()
    body = {"id": run, "project": "p", "config": config or {}}
    assert client.post("/api/v1/runs", json=body).status_code == 201
    return run


@pytest.fixture
def run_id(client: TestClient) -> str:
    return _create_run(client)


def _sample(step: int, index: int, **extra: object) -> dict:
    reward = (index * 7 % 10) / 10
    return {
        "step": step,
        "index": index,
        "prompt": f"prompt {step}/{index}",
        "response": f"answer {index}" + (" needle" if index % 4 == 0 else ""),
        "reward": reward,
        "kl": index / 100,
        "length": float(10 + index),
        **extra,
    }


def _post(client: TestClient, run_id: str, batch_id: str, samples: list[dict]):  # type: ignore[no-untyped-def]
    body = {"batch_id": batch_id, "samples": samples}
    return client.post(f"/api/v1/runs/{run_id}/samples", json=body)


def _get(client: TestClient, run_id: str, **params: object) -> dict:
    response = client.get(f"/api/v1/runs/{run_id}/samples", params=params)
    assert response.status_code == 200, response.text
    return response.json()


def _stored(client: TestClient) -> int:
    with client.app.state.session_factory() as session:  # type: ignore[attr-defined]
        return int(session.execute(text("SELECT count(*) FROM samples")).scalar_one())


def test_samples_round_trip_sorted_filtered_searched_paged(client: TestClient, run_id: str):
    batch = [_sample(step, i) for step in (1, 2, 3) for i in range(10)]
    tokens = {"text": ["a", "<eos>"], "kl": [0.5, None], "logprobs": [-0.1, -3.0]}
    batch[0] = {**batch[0], "tokens": tokens, "scores": {"reward_format": 1.0}, "cut": True}
    ack = _post(client, run_id, "b1", batch)
    assert ack.json() == {"batch_id": "b1", "duplicate": False, "samples": 30}
    assert _stored(client) == 30
    page = _get(client, run_id, step=2, sort="reward", order="desc", limit=3)
    assert page["count"] == 10
    assert [(s["step"], s["reward"]) for s in page["data"]] == [(2, 0.9), (2, 0.8), (2, 0.7)]
    first = _get(client, run_id, from_step=1, to_step=1, limit=1)["data"][0]
    assert first["tokens"] is None and first["scores"] == {"reward_format": 1.0} and first["cut"]
    with_tokens = _get(client, run_id, step=1, limit=1, tokens="true")["data"][0]
    assert with_tokens["tokens"] == {**tokens, "entropy": None, "ratio": None}
    filtered = _get(client, run_id, min_reward=0.2, max_reward=0.4, min_kl=0.05)
    assert filtered["count"] == 6 and {s["index"] for s in filtered["data"]} == {6, 9}
    found = _get(client, run_id, q="NEEDLE", sort="kl", order="desc", limit=2, offset=1)
    assert found["count"] == 9  # indices 0, 4, 8 at each of three steps
    assert [(s["step"], s["index"]) for s in found["data"]] == [(2, 8), (3, 8)]
    assert _get(client, run_id, from_step=3)["count"] == 10
    one = _get(client, run_id, step=1, min_index=0, max_index=0, tokens="true")
    assert one["count"] == 1 and one["data"][0]["tokens"]["text"] == ["a", "<eos>"]
    assert _get(client, run_id, min_index=8)["count"] == 6  # indices 8 and 9 of three steps


def test_samples_text_search_over_too_many_rows_asks_for_a_narrower_query(
    app: object, run_id: str, client: TestClient
) -> None:
    app.state.settings.max_sample_search_rows = 5  # type: ignore[attr-defined]
    _post(client, run_id, "b", [_sample(step, i) for step in range(2) for i in range(4)])
    wide = client.get(f"/api/v1/runs/{run_id}/samples", params={"q": "needle"})
    assert wide.status_code == 413 and "narrow it with step" in wide.json()["detail"]
    assert _get(client, run_id, q="needle", step=1)["count"] == 1


def test_samples_of_another_split_stay_apart(client: TestClient, run_id: str) -> None:
    both = [_sample(1, 0), _sample(1, 0, split="validation", response="val")]
    assert _post(client, run_id, "b", both).json()["samples"] == 2
    assert [s["split"] for s in _get(client, run_id)["data"]] == ["train"]
    (val,) = _get(client, run_id, split="validation")["data"]
    assert (val["step"], val["index"], val["response"]) == (1, 0, "val")
    bad = _post(client, run_id, "c", [_sample(2, 0, split="Val!")])
    assert bad.status_code == 422 and "split" in json.dumps(bad.json()["detail"])


def test_samples_replayed_batch_id_is_a_no_op(client: TestClient, run_id: str) -> None:
    assert _post(client, run_id, "same", [_sample(1, 0)]).json()["duplicate"] is False
    replay = _post(client, run_id, "same", [_sample(1, 0, reward=-5.0), _sample(1, 1)])
    assert replay.json() == {"batch_id": "same", "duplicate": True, "samples": 2}
    assert [s["reward"] for s in _get(client, run_id)["data"]] == [0.0]


def test_samples_of_a_stored_step_and_index_are_replaced(client: TestClient, run_id: str):
    _post(client, run_id, "a", [_sample(1, 0)])
    _post(client, run_id, "b", [_sample(1, 0, response="new")])
    assert [s["response"] for s in _get(client, run_id)["data"]] == ["new"]


def test_samples_named_twice_in_a_batch_are_stored_once_the_later(
    client: TestClient, run_id: str
) -> None:
    """As a later batch's sample of a stored step and index replaces it."""
    batch = [_sample(1, 0, response="old"), _sample(2, 0), _sample(1, 0, response="new")]
    assert _post(client, run_id, "b", batch).json()["samples"] == 2
    stored = [(s["step"], s["response"]) for s in _get(client, run_id)["data"]]
    assert stored == [(1, "new"), (2, "answer 0 needle")]


def test_samples_per_token_arrays_of_different_lengths_are_stored_as_sent(
    client: TestClient, run_id: str
) -> None:
    tokens = {"text": ["a", "b", "c"], "kl": [0.5], "entropy": [1.0, None, 2.0, 3.0]}
    assert _post(client, run_id, "b", [_sample(1, 0, tokens=tokens)]).status_code == 200
    (read,) = _get(client, run_id, tokens="true")["data"]
    assert {k: v for k, v in read["tokens"].items() if v is not None} == tokens


@pytest.mark.parametrize(
    ("body", "status", "detail"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b"[]", 400, "JSON object with batch_id and samples"),
        ({"batch_id": "x", "samples": [{"step": -1, "index": 0}]}, 422, "greater than or equal"),
        ({"batch_id": "x", "samples": [{"step": 1, "index": 0, "rewrd": 1}]}, 422, "Extra"),
        ({"batch_id": "x", "samples": [{"step": 1, "index": 0, "reward": "high"}]}, 422, "number"),
    ],
)
def test_samples_malformed_batch_is_refused_with_a_fix_and_stores_nothing(
    client: TestClient, run_id: str, body: object, status: int, detail: str
) -> None:
    url = f"/api/v1/runs/{run_id}/samples"
    if isinstance(body, bytes):
        response = client.post(url, content=body, headers={"Content-Type": "application/json"})
    else:
        response = client.post(url, json=body)
    assert response.status_code == status
    assert detail in json.dumps(response.json()["detail"])
    assert _stored(client) == 0


def test_samples_of_an_unknown_run_are_404(client: TestClient) -> None:
    response = _post(client, "no-such-run", "b", [_sample(1, 0)])
    assert response.status_code == 404 and "POST /api/v1/runs" in response.json()["detail"]


@pytest.mark.parametrize(
    ("params", "detail"),
    [
        ({"sort": "rewrd"}, "use one of step, reward"),
        ({"min_rewrd": 1}, "use min_/max_ with one of reward"),
        ({"max_kl": "big"}, "is not a number"),
    ],
)
def test_samples_bad_query_names_the_fix(client: TestClient, run_id: str, params: dict, detail):  # type: ignore[no-untyped-def]
    response = client.get(f"/api/v1/runs/{run_id}/samples", params=params)
    assert response.status_code in (400, 422)
    assert detail in json.dumps(response.json()["detail"])


def test_samples_step_narrows_a_given_range(client: TestClient, run_id: str) -> None:
    assert _post(client, run_id, "b", [_sample(s, 0) for s in (1, 2, 3)]).status_code == 200
    inside = client.get(f"/api/v1/runs/{run_id}/samples", params={"step": 2, "to_step": 3})
    assert [s["step"] for s in inside.json()["data"]] == [2]
    outside = client.get(f"/api/v1/runs/{run_id}/samples", params={"step": 1, "from_step": 2})
    assert outside.json()["count"] == 0


def _add_alert(client: TestClient, run_id: str, first_step: int, last_step: int) -> int:
    with client.app.state.session_factory() as session:  # type: ignore[attr-defined]
        alert = Alert(
            run_id=run_id,
            detector="entropy_collapse",
            severity="warn",
            first_step=first_step,
            last_step=last_step,
            message="m",
            evidence={},
            advice=[],
            created_at=utcnow(),
            updated_at=utcnow(),
        )
        session.add(alert)
        session.commit()
        return int(alert.id)


def test_alert_samples_are_those_of_its_steps_worst_first(client: TestClient, run_id: str):
    _post(client, run_id, "b", [_sample(step, i) for step in range(8) for i in range(4)])
    alert_id = _add_alert(client, run_id, first_step=3, last_step=5)
    found = client.get(f"/api/v1/alerts/{alert_id}/samples", params={"limit": 4}).json()
    assert found["count"] == 12
    assert [s["reward"] for s in found["data"]] == [0.0, 0.0, 0.0, 0.1]
    assert {s["step"] for s in found["data"]} <= {3, 4, 5}
    wider = client.get(f"/api/v1/alerts/{alert_id}/samples", params={"before": 2}).json()
    assert wider["count"] == 20
    assert client.get("/api/v1/alerts/999999/samples").status_code == 404


def test_samples_retention_thins_steps_before_the_last_k(client: TestClient) -> None:
    run_id = _create_run(client, {"samples_keep_steps": 3, "samples_thinned_per_step": 1})
    for step in range(10):
        _post(client, run_id, f"b{step}", [_sample(step, i) for i in range(8)])
    kept = _get(client, run_id, limit=1000)["data"]
    by_step = {s: sorted(x["reward"] for x in kept if x["step"] == s) for s in range(10)}
    assert [by_step[s] for s in range(7)] == [[0.0, 0.9]] * 7, by_step  # the worst, the best
    assert all(len(by_step[s]) == 8 for s in (7, 8, 9))
    assert _stored(client) == 7 * 2 + 3 * 8


def test_samples_retention_spares_the_steps_around_an_alert(client: TestClient) -> None:
    run_id = _create_run(client, {"samples_keep_steps": 3, "samples_alert_margin_steps": 1})
    _add_alert(client, run_id, first_step=2, last_step=3)
    for step in range(10):
        _post(client, run_id, f"b{step}", [_sample(step, i) for i in range(8)])
    kept = _get(client, run_id, limit=1000)["data"]
    per_step = [sum(1 for x in kept if x["step"] == s) for s in range(10)]
    assert per_step == [4, 8, 8, 8, 8, 4, 4, 8, 8, 8]  # 1-4: the alert's steps and one each side


def test_samples_rewind_supersedes_later_samples(client: TestClient, run_id: str) -> None:
    _post(client, run_id, "b", [_sample(step, 0) for step in range(6)])
    assert client.post(f"/api/v1/runs/{run_id}/rewind", json={"resume_from_step": 3}).is_success
    assert [s["step"] for s in _get(client, run_id)["data"]] == [0, 1, 2, 3]


def _post_gzip(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url,
        data=gzip.compress(json.dumps(body).encode()),
        method="POST",
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return dict(json.loads(response.read()))


def test_samples_from_many_simultaneous_clients_are_all_stored(db_server: RunningServer):
    clients = 48
    runs = [new_run_id(), new_run_id()]
    for run in runs:
        request = urllib.request.Request(
            f"{db_server.url}/api/v1/runs",
            data=json.dumps({"id": run, "project": "p"}).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        urllib.request.urlopen(request, timeout=30).close()

    def send(n: int) -> dict:
        body = {"batch_id": f"c{n}", "samples": [_sample(n, i) for i in range(16)]}
        return _post_gzip(f"{db_server.url}/api/v1/runs/{runs[n % 2]}/samples", body)

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        acks = list(pool.map(send, range(clients)))
        replays = list(pool.map(send, range(clients)))
    assert [a["duplicate"] for a in acks] == [False] * clients
    assert [a["duplicate"] for a in replays] == [True] * clients
    with db_server.session_factory() as session:
        counts = dict(
            session.execute(text("SELECT run_id, count(*) FROM samples GROUP BY run_id")).all()
        )
    assert counts == {runs[0]: 16 * clients // 2, runs[1]: 16 * clients // 2}


def test_sample_steps_lists_each_step_with_its_count(client: TestClient) -> None:
    run_id = new_run_id("steps")
    assert client.post("/api/v1/runs", json={"id": run_id, "project": "s"}).status_code == 201
    rows = [{"step": s, "index": i, "reward": 1.0} for s in (2, 5) for i in range(s)]
    body = {"batch_id": "b", "samples": rows}
    assert client.post(f"/api/v1/runs/{run_id}/samples", json=body).status_code == 200
    answer = client.get(f"/api/v1/runs/{run_id}/sample-steps").json()
    assert answer == {"data": [{"step": 2, "samples": 2}, {"step": 5, "samples": 5}], "count": 2}
    assert client.get(f"/api/v1/runs/{run_id}/sample-steps?split=validation").json()["count"] == 0
    assert client.get("/api/v1/runs/ghost/sample-steps").status_code == 404


SIGNALS = "samples/truncated_fraction,samples/degenerate_fraction,samples/repetition_rate"


def _signals(client: TestClient, run_id: str) -> dict[str, dict[int, float]]:
    answer = client.get(f"/api/v1/runs/{run_id}/series", params={"keys": SIGNALS}).json()
    return {
        key: dict(zip(data["steps"], data["values"], strict=True))
        for key, data in answer["series"].items()
    }


def test_samples_posted_without_their_signals_get_them_derived_once(
    client: TestClient, run_id: str
) -> None:
    step = [
        _sample(3, 0, response="", truncated=1.0),  # empty: degenerate
        _sample(3, 1, truncated=0.0),
        _sample(3, 2, truncated=0.0, response="a b c d a b c d a b c d"),  # 9 4-grams, 4 unique
        _sample(3, 3, split="validation", response="", truncated=1.0),  # not a training sample
    ]
    assert _post(client, run_id, "plain", step).status_code == 200
    assert _post(client, run_id, "plain", step).json()["duplicate"] is True  # derives nothing
    signals = _signals(client, run_id)
    assert signals["samples/truncated_fraction"] == {3: pytest.approx(1 / 3)}
    assert signals["samples/degenerate_fraction"] == {3: pytest.approx(1 / 3)}
    assert signals["samples/repetition_rate"] == {3: pytest.approx(1 - 4 / 9)}


def test_samples_whose_client_logged_their_signals_get_none_derived(
    client: TestClient, run_id: str
) -> None:
    body = {"batch_id": "hook", "samples": [_sample(4, 0, response="")], "signals_logged": True}
    assert client.post(f"/api/v1/runs/{run_id}/samples", json=body).status_code == 200
    answer = client.get(f"/api/v1/runs/{run_id}/series", params={"keys": SIGNALS}).json()
    assert answer["series"] == {} and len(answer["missing"]) == 3
