"""Detectors in the service: alerts from ingest, the alert API, backtests and webhooks."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, select
from sqlalchemy.orm import Session

from rlguard_backend.core.app import create_app
from rlguard_backend.core.config import Settings
from rlguard_backend.detection import feed, suite_cache
from rlguard_backend.models import DetectorState, WebhookDelivery
from rlguard_backend.stability import DetectorSuite
from tests.conftest import new_run_id
from tests.hook.hookutil import ServiceProcess
from tests.support.alerts import (
    COLLAPSE,
    HEALTHY,
    alert_view,
    create_run,
    send_batches,
    wire_steps,
)

CONDITION_TIMEOUT_S = 30


def test_alerts_entropy_collapse_opens_during_ingest(client: TestClient) -> None:
    run_id = new_run_id()
    create_run(client, run_id, COLLAPSE.config)
    opened = send_batches(client, run_id, wire_steps(COLLAPSE.run(seed=1)[:120]), size=20)
    collapse = [a for a in opened if a["key"] == "entropy_collapse"]
    assert collapse, opened
    listed = client.get(f"/api/v1/runs/{run_id}/alerts", params={"severity": "critical"}).json()
    alert = next(a for a in listed["data"] if a["key"] == "entropy_collapse")
    assert (alert["detector"], alert["status"]) == ("entropy_collapse", "open")
    assert 15 <= alert["first_step"] <= 40
    assert alert["message"] and alert["advice"] and alert["evidence"]
    across = client.get("/api/v1/alerts", params={"project": "alerts", "status": "open"}).json()
    assert alert["id"] in {a["id"] for a in across["data"]}
    assert client.get("/api/v1/alerts", params={"project": "elsewhere"}).json()["count"] == 0


def test_alerts_healthy_run_stays_silent(client: TestClient) -> None:
    run_id = new_run_id()
    create_run(client, run_id, HEALTHY.config)
    assert send_batches(client, run_id, wire_steps(HEALTHY.run(seed=3)), size=50) == []
    assert client.get(f"/api/v1/runs/{run_id}/alerts").json()["count"] == 0


@pytest.fixture
def second_process(db_url: str) -> Iterator[str]:
    """Another service process on the same database, as a load balancer would run it."""
    process = ServiceProcess(db_url).start()
    try:
        yield process.url
    finally:
        process.stop()


def test_alerts_same_for_any_batching_and_two_processes(
    client: TestClient, second_process: str
) -> None:
    steps = wire_steps(COLLAPSE.run(seed=5))
    views = []
    for size in (len(steps), 1):
        run_id = new_run_id()
        create_run(client, run_id, COLLAPSE.config)
        send_batches(client, run_id, steps, size)
        views.append(alert_view(client, run_id))
    run_id = new_run_id()
    create_run(client, run_id, COLLAPSE.config)
    with httpx.Client(base_url=second_process, timeout=30) as other:
        for i in range(0, len(steps), 7):
            http = client if (i // 7) % 2 == 0 else other
            body = {"batch_id": f"alt{i}", "steps": steps[i : i + 7]}
            assert http.post(f"/api/v1/runs/{run_id}/batches", json=body).status_code == 200
    views.append(alert_view(client, run_id))
    assert views[0], "the collapse scenario must raise alerts"
    assert views[0] == views[1] == views[2]


def _alert_contents(alerts: list[dict[str, Any]]) -> list[str]:
    """What a batch may change in each alert, comparable across runs (ids, times left out; an
    alert closed with its finished run counts as the open alert it was)."""
    fields = ("detector", "key", "severity", "first_step", "last_step", "message")
    return sorted(
        json.dumps(
            [a[f] for f in fields]
            + ["open" if a.get("closed_with_run") else a["status"], a["evidence"]]
        )
        for a in alerts
    )


def test_alerts_store_latest_message_and_evidence_for_any_batching(client: TestClient) -> None:
    # Open alerts re-emit an update every 50 steps; a batch of many steps stores each alert's
    # last state, as a backtest of the whole run (one pass, no batches) reports it.
    steps = wire_steps(COLLAPSE.run(seed=7))
    for size in (len(steps), 120, 1):
        run_id = new_run_id()
        create_run(client, run_id, COLLAPSE.config)
        send_batches(client, run_id, steps, size)
        client.patch(f"/api/v1/runs/{run_id}", json={"status": "finished"})  # feeds the last
        stored = client.get(f"/api/v1/runs/{run_id}/alerts").json()["data"]
        replayed = client.post(f"/api/v1/runs/{run_id}/detect", json={}).json()["alerts"]
        assert len(stored) >= 2
        assert _alert_contents(stored) == _alert_contents(replayed)


def test_alert_acknowledge_and_resolve(client: TestClient) -> None:
    run_id = new_run_id()
    create_run(client, run_id, COLLAPSE.config)
    send_batches(client, run_id, wire_steps(COLLAPSE.run(seed=2)[:80]), size=80)
    alert = client.get(f"/api/v1/runs/{run_id}/alerts").json()["data"][0]
    acked = client.patch(f"/api/v1/alerts/{alert['id']}", json={"acknowledged": True}).json()
    assert (acked["acknowledged"], acked["status"]) == (True, "open")
    resolved = client.patch(f"/api/v1/alerts/{alert['id']}", json={"status": "resolved"}).json()
    assert resolved["status"] == "resolved"
    assert client.patch("/api/v1/alerts/999999", json={"acknowledged": True}).status_code == 404
    bad = client.patch(f"/api/v1/alerts/{alert['id']}", json={"status": "snoozed"})
    assert (bad.status_code, bad.json()["detail"][0]["loc"]) == (422, ["body", "status"])


def test_run_end_checks_the_last_step(client: TestClient) -> None:
    run_id = new_run_id()
    create_run(client, run_id, HEALTHY.config)
    steps = wire_steps(HEALTHY.run(seed=4)[:30])
    steps[-1]["values"]["actor/ppo_kl"] = "NaN"
    send_batches(client, run_id, steps, size=30)
    assert client.get(f"/api/v1/runs/{run_id}/alerts").json()["count"] == 0
    client.patch(f"/api/v1/runs/{run_id}", json={"status": "failed"})
    alerts = client.get(f"/api/v1/runs/{run_id}/alerts").json()["data"]
    assert [(a["detector"], a["severity"], a["first_step"]) for a in alerts] == [
        ("nonfinite", "critical", 29)
    ]


def test_run_config_the_detectors_cannot_read_is_422(client: TestClient) -> None:
    response = client.post(
        "/api/v1/runs",
        json={"id": new_run_id(), "project": "p", "config": {"rlguard_thresholds": {"nope.x": 1}}},
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "config"]
    assert "nope" in response.json()["detail"][0]["msg"]


def test_detect_backtest_leaves_live_alerts_unless_applied(db_url: str) -> None:
    app = create_app(Settings(database_url=db_url, detectors_enabled=False))
    with TestClient(app) as client:
        run_id = new_run_id()
        create_run(client, run_id, COLLAPSE.config)
        send_batches(client, run_id, wire_steps(COLLAPSE.run(seed=7)), size=100)
        assert client.get(f"/api/v1/runs/{run_id}/alerts").json()["count"] == 0
        dry = client.post(f"/api/v1/runs/{run_id}/detect", json={}).json()
        assert dry["steps"] == COLLAPSE.steps and dry["applied"] is False
        assert any(a["key"] == "entropy_collapse" for a in dry["alerts"])
        assert client.get(f"/api/v1/runs/{run_id}/alerts").json()["count"] == 0
        strict = client.post(
            f"/api/v1/runs/{run_id}/detect",
            json={
                "thresholds": {
                    "entropy_collapse.spent_ratio": 0.01,
                    "entropy_collapse.collapse_ratio": 0.001,
                }
            },
        ).json()
        assert not any(a["key"] == "entropy_collapse" for a in strict["alerts"])
        bad = client.post(f"/api/v1/runs/{run_id}/detect", json={"thresholds": {"no.such": 1}})
        assert (bad.status_code, bad.json()["detail"][0]["loc"]) == (422, ["body", "thresholds"])
        applied = client.post(f"/api/v1/runs/{run_id}/detect", json={"apply": True}).json()
        live = client.get(f"/api/v1/runs/{run_id}/alerts").json()
        assert live["count"] == len(applied["alerts"]) > 0
    app.state.engine.dispose()


class _FlakyReceiver(http.server.BaseHTTPRequestHandler):
    """Answers 503 to the first ``failures`` posts, then 200; records every body."""

    failures = 2
    bodies: list[dict] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.bodies.append(body)
        self.send_response(503 if len(self.bodies) <= self.failures else 200)
        self.end_headers()

    def log_message(self, *_args: Any) -> None:
        return


@pytest.fixture
def receiver() -> Iterator[tuple[str, type[_FlakyReceiver]]]:
    handler = type("Receiver", (_FlakyReceiver,), {"bodies": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", handler
    server.shutdown()
    server.server_close()


def _wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + CONDITION_TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_webhook_delivered_once_after_failed_attempts(
    sqlite_url: str, receiver: tuple[str, type[_FlakyReceiver]]
) -> None:
    url, handler = receiver
    settings = Settings(
        database_url=sqlite_url,
        webhooks=[
            {"url": url, "format": "slack", "project": "alerts"},
            {"url": url + "/other-project", "project": "nobody"},
        ],
        webhook_poll_interval_s=0.05,
        webhook_backoff_base_s=0.05,
    )
    app = create_app(settings)
    with TestClient(app) as client:
        run_id = new_run_id()
        create_run(client, run_id, HEALTHY.config)
        steps = wire_steps(HEALTHY.run(seed=9)[:20])
        steps[10]["values"]["actor/pg_loss"] = "NaN"
        send_batches(client, run_id, steps, size=20)
        factory = app.state.session_factory

        def delivered() -> bool:
            with factory() as session:
                rows = list(session.scalars(select(WebhookDelivery)))
            return bool(rows) and all(r.delivered_at is not None for r in rows)

        _wait_for(delivered, "webhook delivery")
        with factory() as session:
            rows = list(session.scalars(select(WebhookDelivery)))
        assert [(r.attempts, r.target) for r in rows] == [(3, url)]
    app.state.engine.dispose()
    assert len(handler.bodies) == 3
    assert all(b == handler.bodies[0] for b in handler.bodies)
    assert "nonfinite" in handler.bodies[0]["text"] and handler.bodies[0]["blocks"]


def test_detector_state_from_another_release_is_rebuilt(client: TestClient) -> None:
    from rlguard_backend.core.db import write_session

    run_id = new_run_id()
    create_run(client, run_id, COLLAPSE.config)
    steps = wire_steps(COLLAPSE.run(seed=11))
    send_batches(client, run_id, steps[:60], size=60)
    before = alert_view(client, run_id)
    factory = client.app.state.session_factory  # type: ignore[attr-defined]
    with write_session(factory) as session:
        row = session.get(DetectorState, (run_id, "suite"))
        assert row is not None
        # Written by another release's process: a state this one cannot read, a new generation.
        row.state = {"suite": {"version": -1}, "pending": None}
        row.generation = "another-release"
        session.commit()
    body = {"batch_id": "after-upgrade", "steps": steps[60:61]}
    assert client.post(f"/api/v1/runs/{run_id}/batches", json=body).status_code == 200
    after = alert_view(client, run_id)
    assert before and {a[:2] for a in before} <= {a[:2] for a in after}
    with factory() as session:
        state = session.get(DetectorState, (run_id, "suite"))
        # Rebuilt from the 60 stored steps (all fed), then the batch: its step is pending.
        assert state is not None and state.state["suite"]["last_step"] == 59
        assert state.state["pending"]["step"] == 60


def test_quiet_batch_reads_the_run_once_and_no_state(sqlite_url: str) -> None:
    """A batch that changes no alert reads the run row once (its locked read) and, with this
    process's suite current, only the state's generation; it writes no state (no checkpoint is
    due): every statement SQLite runs is seen."""
    app = create_app(Settings(database_url=sqlite_url))
    with TestClient(app) as client:
        run_id = new_run_id()
        create_run(client, run_id, HEALTHY.config)
        steps = wire_steps(HEALTHY.run(seed=3))
        assert send_batches(client, run_id, steps[:100], size=100) == []
        engine = app.state.engine
        statements: list[str] = []
        event.listen(
            engine, "connect", lambda conn, _record: conn.set_trace_callback(statements.append)
        )
        engine.dispose()  # the next connection is traced from its first statement
        body = {"batch_id": "quiet", "steps": steps[100:101]}
        response = client.post(f"/api/v1/runs/{run_id}/batches", json=body)
        assert response.status_code == 200 and response.json()["alerts"] == []
    assert not [s for s in statements if "UPDATE detector_state" in s], statements
    assert len([s for s in statements if "FROM detector_state" in s]) == 1, statements
    assert len([s for s in statements if "FROM runs" in s]) == 1, statements
    assert not [s for s in statements if "detector_state.state" in s], statements


def test_suite_cache_listens_to_the_apps_session_factory_not_every_session(
    sqlite_url: str,
) -> None:
    """The live suites are kept on commit through the app's own sessionmaker: sessions of
    other factories (another app, a script) carry no listener of the detectors."""
    app = create_app(Settings(database_url=sqlite_url))
    with TestClient(app) as client:
        run_id = new_run_id()
        create_run(client, run_id, HEALTHY.config)
        send_batches(client, run_id, wire_steps(HEALTHY.run(seed=1))[:20], size=20)
    factory = app.state.session_factory  # its sessions are of its own Session subclass
    assert event.contains(factory.class_, "after_commit", suite_cache._after_commit)
    assert not event.contains(Session, "after_commit", suite_cache._after_commit)
    assert feed.SUITES.peek(run_id) is not None


def _service_suite(app: Any, run_id: str) -> tuple[DetectorSuite, Any]:
    """The live suite the service keeps for the run, and its pending step."""
    live = feed.SUITES.peek(run_id)
    assert live is not None
    return live.suite, live.pending


def _stepwise_state(config: dict[str, Any], steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The state of a suite fed every step but the last, one at a time."""
    suite = feed.make_suite(config, Settings())
    for entry in steps[:-1]:
        suite.feed(entry["step"], {k: float(v) for k, v in entry["values"].items()})
    return suite.dump_state()


def test_bulk_batches_in_the_service_end_where_step_by_step_feeding_ends(
    sqlite_url: str,
) -> None:
    """Batches of 100 steps go to the detectors, the step held back from the previous batch
    (trimmed to the keys the detectors read) at their head: the detectors end where
    step-by-step feeding ends."""
    app = create_app(Settings(database_url=sqlite_url))
    with TestClient(app) as client:
        run_id = new_run_id()
        create_run(client, run_id, HEALTHY.config)
        steps = wire_steps(HEALTHY.run(seed=3))
        for entry in steps:  # keys the detectors do not read: the held-back step drops them
            entry["values"]["system/gpu0/util"] = 90.0
        assert len(steps) >= 300 and send_batches(client, run_id, steps, size=100) == []
        suite, pending = _service_suite(app, run_id)
    assert pending is not None and pending[0] == steps[-1]["step"]
    assert "system/gpu0/util" not in pending[1]
    assert suite.dump_state() == _stepwise_state(HEALTHY.config, steps)


def test_bulk_batches_whose_keys_change_between_batches(sqlite_url: str) -> None:
    """A batch that logs other detector keys than the step held back from the one before:
    the state is still step-by-step's."""
    app = create_app(Settings(database_url=sqlite_url))
    with TestClient(app) as client:
        run_id = new_run_id()
        create_run(client, run_id, HEALTHY.config)
        steps = wire_steps(HEALTHY.run(seed=4))
        for entry in steps:
            if entry["step"] // 100 % 2:  # every other batch lacks the grad norm
                entry["values"].pop("actor/grad_norm", None)
        opened = send_batches(client, run_id, steps, size=100)
        # 100 steps without it while others arrive: it has stopped, for a while (INFO)
        assert {(a["detector"], a["key"], a["severity"]) for a in opened} == {
            ("signal_stopped", "other_signal_stopped", "info")
        }
        assert all("actor/grad_norm" in a["message"] for a in opened)
        suite, _ = _service_suite(app, run_id)
    assert suite.dump_state() == _stepwise_state(HEALTHY.config, steps)


def test_an_alert_resolved_by_hand_while_it_keeps_firing_opens_again(client: TestClient) -> None:
    """A batch whose events only refresh open alerts updates their rows in place; one whose
    alert was resolved over REST meanwhile opens a new alert instead of touching the old one."""
    run_id = new_run_id()
    create_run(client, run_id, COLLAPSE.config)
    steps = wire_steps(COLLAPSE.run(seed=2))
    send_batches(client, run_id, steps[:200], size=100)
    before = {a["key"]: a for a in client.get(f"/api/v1/runs/{run_id}/alerts").json()["data"]}
    collapse = before["entropy_collapse"]
    resolved = client.patch(f"/api/v1/alerts/{collapse['id']}", json={"status": "resolved"})
    assert resolved.json()["status"] == "resolved"
    body = {"batch_id": "after-resolve", "steps": steps[200:300]}  # still collapsed: it fires
    opened = client.post(f"/api/v1/runs/{run_id}/batches", json=body).json()["alerts"]
    after = client.get(f"/api/v1/runs/{run_id}/alerts").json()["data"]
    again = [a for a in after if a["key"] == "entropy_collapse" and a["status"] == "open"]
    assert [a["key"] for a in opened] == ["entropy_collapse"] and len(again) == 1
    assert again[0]["id"] != collapse["id"] and again[0]["last_step"] > collapse["last_step"]
    old = next(a for a in after if a["id"] == collapse["id"])
    assert (old["status"], old["last_step"]) == ("resolved", collapse["last_step"])
    refreshed = [
        a for a in after if a["status"] == "open" and a["id"] in {b["id"] for b in before.values()}
    ]
    assert refreshed and all(a["last_step"] > before[a["key"]]["last_step"] for a in refreshed)


# Checkpoints: the detectors' state is written every detector_checkpoint_steps steps (or
# detector_checkpoint_batches batches), and a process that resumes from it feeds the steps
# stored since.


def _stored_state(factory: Any, run_id: str) -> dict[str, Any]:
    with factory() as session:
        row = session.get(DetectorState, (run_id, "suite"))
        assert row is not None
        return dict(row.state)


def _state_fed_every_step(config: dict[str, Any], steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The state of a suite fed each step once, the first time it comes, one at a time."""
    suite = feed.make_suite(config, Settings())
    for entry in steps:
        suite.feed(entry["step"], {k: float(v) for k, v in entry["values"].items()})
    return suite.dump_state()


def _takeover_batches(steps: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """20-step batches for process "a", but batches 5, 10 and 11 for "b"; batch 10 re-logs
    step 150, which "a" fed after its last checkpoint, with values far from the first ones."""
    batches = []
    for index, start in enumerate(range(0, len(steps), 20)):
        chunk = steps[start : start + 20]
        if index == 10:
            again = {k: (1e-4 if "entropy" in k else v) for k, v in steps[150]["values"].items()}
            chunk = [{"step": 150, "values": again}, *chunk]
        batches.append(("b" if index in (5, 10, 11) else "a", chunk))
    return batches


def test_a_process_taking_over_a_run_feeds_the_steps_since_the_checkpoint(
    client: TestClient, second_process: str
) -> None:
    """Process a feeds batches without writing a checkpoint; process b, taking the next batch,
    resumes from the checkpoint and feeds the steps stored since, before its own batch's
    points are stored (one of them rewrites a step a fed since): alerts and state end as in one
    process, and as feeding every step once."""
    steps = wire_steps(COLLAPSE.run(seed=5))
    batches = _takeover_batches(steps)
    factory = client.app.state.session_factory  # type: ignore[attr-defined]
    ends = []
    with httpx.Client(base_url=second_process, timeout=30) as other:
        for two_processes in (False, True):
            run_id = new_run_id()
            create_run(client, run_id, COLLAPSE.config)
            for index, (process, chunk) in enumerate(batches):
                http = other if two_processes and process == "b" else client
                body = {"batch_id": f"t{index}", "steps": chunk}
                assert http.post(f"/api/v1/runs/{run_id}/batches", json=body).status_code == 200
                if two_processes and index == 4:  # a's checkpoint is its first batch's
                    assert _stored_state(factory, run_id)["suite"]["last_step"] == 18
            client.patch(f"/api/v1/runs/{run_id}", json={"status": "finished"})
            ends.append((alert_view(client, run_id), _stored_state(factory, run_id)))
    assert ends[0][0], "the collapse scenario must raise alerts"
    assert ends[0] == ends[1]
    assert ends[1][1]["pending"] is None
    assert ends[1][1]["suite"] == _state_fed_every_step(COLLAPSE.config, steps)


def _unit_of_work(
    factory: Any, settings: Settings, run_id: str, batch: Any, suites: Any, commit: bool
) -> None:
    """The batch handler's unit of work, committed or rolled back."""
    from rlguard_backend import ingest
    from rlguard_backend.core.db import write_session

    with write_session(factory) as session:
        opened = ingest.open_batch(session, run_id, batch)
        live = feed.live_suite(
            session, run_id, opened.config, settings, opened.run_last_step, suites
        )
        ingest.store_batch(session, run_id, batch, opened)
        feed.detect_steps(session, live, batch.steps, settings)
        if commit:
            session.commit()
        else:
            session.rollback()


def _collapse_run(client: TestClient, seed: int, size: int) -> tuple[str, list[dict], list[Any]]:
    """A new run of the collapse scenario: its id, its steps, and those in batches of `size`."""
    from rlguard_backend.schemas import BatchIn

    run_id = new_run_id()
    create_run(client, run_id, COLLAPSE.config)
    steps = wire_steps(COLLAPSE.run(seed=seed))
    batches = [
        BatchIn.model_validate({"batch_id": f"s{i}", "steps": steps[i : i + size]})
        for i in range(0, len(steps), size)
    ]
    return run_id, steps, batches


def test_a_rolled_back_batch_leaves_no_suite_ahead_of_the_database(
    client: TestClient, settings: Settings
) -> None:
    """A unit of work that rolls back after feeding the detectors does not cache its suite:
    the batch sent again is fed from the database; a process restart (an empty cache) resumes
    from the checkpoint and the steps stored since."""
    run_id, steps, batches = _collapse_run(client, seed=6, size=30)
    factory = client.app.state.session_factory  # type: ignore[attr-defined]
    suites = feed.SuiteCache()
    for batch in batches[:3]:
        _unit_of_work(factory, settings, run_id, batch, suites, commit=True)
    _unit_of_work(factory, settings, run_id, batches[3], suites, commit=False)
    assert suites.peek(run_id) is None
    for batch in batches[3:6]:
        _unit_of_work(factory, settings, run_id, batch, suites, commit=True)
    assert _stored_state(factory, run_id)["suite"]["last_step"] < batches[5].steps[0].step
    restarted = feed.SuiteCache()
    for batch in batches[6:]:
        _unit_of_work(factory, settings, run_id, batch, restarted, commit=True)
    live = restarted.peek(run_id)
    assert live is not None and live.pending is not None
    assert live.pending[0] == steps[-1]["step"]
    assert live.suite.dump_state() == _stepwise_state(COLLAPSE.config, steps)


def test_a_run_end_seen_by_another_process_leaves_it_no_suite(
    client: TestClient, settings: Settings
) -> None:
    """A process that resumes a run from its checkpoint only to find nothing pending (the run
    ended twice) does not keep that suite: the process that wrote the checkpoint may feed the
    run on from it without writing another, and the two would no longer agree."""
    from rlguard_backend.core.db import write_session

    run_id, steps, batches = _collapse_run(client, seed=9, size=50)
    factory = client.app.state.session_factory  # type: ignore[attr-defined]
    first, second = feed.SuiteCache(), feed.SuiteCache()

    def end_run(suites: feed.SuiteCache) -> None:
        with write_session(factory) as session:
            feed.flush_pending(session, feed.run_for_update(session, run_id), settings, suites)
            session.commit()

    for batch in batches[:3]:
        _unit_of_work(factory, settings, run_id, batch, first, commit=True)
    end_run(first)
    end_run(second)
    assert second.peek(run_id) is None
    for batch, suites in zip(batches[3:], [first, first, second], strict=True):
        _unit_of_work(factory, settings, run_id, batch, suites, commit=True)
    live = second.peek(run_id)
    assert live is not None and live.pending is not None
    assert live.suite.dump_state() == _stepwise_state(COLLAPSE.config, steps)


def test_checkpoints_come_every_checkpoint_steps_or_batches(sqlite_url: str) -> None:
    """The state is written after a process's first batch of a run, then once the steps (or
    batches) fed since reach the limit, and after any batch that is not a plain append."""
    settings = Settings(
        database_url=sqlite_url, detector_checkpoint_steps=60, detector_checkpoint_batches=4
    )
    app = create_app(settings)
    with TestClient(app) as client:
        run_id = new_run_id()
        create_run(client, run_id, HEALTHY.config)
        steps = wire_steps(HEALTHY.run(seed=8))
        factory = app.state.session_factory
        generations, fed = [], []
        sizes = [20] * 7 + [1] * 9  # 140 steps in batches of 20, then 9 of one step
        batches, start = [], 0
        for size in sizes:
            batches.append(steps[start : start + size])
            start += size
        batches.insert(12, [steps[5]])  # re-logs step 5: not an append
        for index, chunk in enumerate(batches):
            body = {"batch_id": f"c{index}", "steps": chunk}
            assert client.post(f"/api/v1/runs/{run_id}/batches", json=body).status_code == 200
            with factory() as session:
                row = session.get(DetectorState, (run_id, "suite"))
                assert row is not None
                generations.append(row.generation)
                fed.append(row.state["suite"]["last_step"])
    app.state.engine.dispose()
    wrote = [i for i in range(len(batches)) if i == 0 or generations[i] != generations[i - 1]]
    # The first batch; 60 steps later, twice; four one-step batches later; the re-log; four
    # batches later.
    assert wrote == [0, 3, 6, 10, 12, 16]
    assert [fed[i] for i in wrote] == [18, 78, 138, 142, 143, 147]
