"""Webhooks managed over REST: stored per project, delivered signed with a link to the run,
changed and deleted with no restart, the outbox kept whole; a real uvicorn, real receivers."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from rlguard_backend.core.app import create_app
from rlguard_backend.core.config import Settings
from rlguard_backend.core.serve import ServerThread
from rlguard_backend.detection import webhook_messages
from rlguard_backend.detection.webhooks import WebhookWorker
from rlguard_backend.models import StoredWebhook, WebhookDelivery, as_utc, utcnow
from rlguard_backend.schemas.webhooks import WebhookMessage
from tests.conftest import RunningServer, new_run_id
from tests.webhook_receiver import Receiver, ReceiverServer, wait_until

API = "/api/v1"
PUBLIC_URL = "https://rlguard.example.com"
SLACK_URL = "https://hooks.slack.com/services/T0001/B0001/TOKENPART"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "reference" / "webhooks.md"


def _settings(db_url: str, *, poll_s: float, backoff_s: float) -> Settings:
    return Settings(
        database_url=db_url,
        public_url=PUBLIC_URL,
        webhook_poll_interval_s=poll_s,
        webhook_backoff_base_s=backoff_s,
    )


@pytest.fixture
def hooked(db_url: str) -> Iterator[RunningServer]:
    """The API with a public URL and a worker polling every 20 ms, on both databases."""
    app = create_app(_settings(db_url, poll_s=0.02, backoff_s=0.02))
    with ServerThread(app) as thread:
        yield RunningServer(url=thread.url, app=app, thread=thread)
    app.state.engine.dispose()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with ReceiverServer() as listening:
        yield listening


def _http(server: RunningServer) -> httpx.Client:
    return httpx.Client(base_url=server.url + API, timeout=30)


def _nan_run(http: httpx.Client, project: str) -> tuple[str, dict[str, Any]]:
    """A run whose NaN entropy opens a critical alert in its first batch; the run and alert."""
    run_id = new_run_id("hooked")
    assert http.post("/runs", json={"id": run_id, "project": project}).status_code == 201
    steps = [{"step": s, "values": {"actor/entropy": "NaN"}} for s in range(12)]
    ack = http.post(f"/runs/{run_id}/batches", json={"batch_id": "nan", "steps": steps}).json()
    assert len(ack["alerts"]) == 1, ack
    return run_id, ack["alerts"][0]


def _verify_snippet() -> Any:
    """The ``verify`` function docs/reference/webhooks.md tells receivers to use, as written."""
    code = re.search(r"```python\n(.*?def verify.*?)```", DOCS.read_text(), re.S)
    assert code, "docs/reference/webhooks.md shows a verify() snippet"
    namespace: dict[str, Any] = {}
    exec(code.group(1), namespace)  # our own documentation's code, run as a receiver would
    return namespace["verify"]


def _outbox(server: RunningServer) -> list[WebhookDelivery]:
    with server.session_factory() as session:
        return list(session.scalars(select(WebhookDelivery).order_by(WebhookDelivery.id)))


def test_webhooks_create_answers_the_secret_once_then_only_its_prefix(
    db_server: RunningServer,
) -> None:
    with _http(db_server) as http:
        made = http.post("/webhooks", json={"url": SLACK_URL, "project": "p"})
        assert made.status_code == 201, made.text
        created = made.json()
        secret = created["secret"]
        assert re.fullmatch(r"[0-9a-f]{64}", secret)
        assert (
            created["secret_prefix"] == secret[:8] and created["created_by"] == "local (auth off)"
        )
        assert (created["format"], created["min_severity"], created["enabled"]) == (
            "json",
            "info",
            True,
        )
        assert created["events"] == ["opened", "escalated", "resolved"]
        listed, read = http.get("/webhooks"), http.get(f"/webhooks/{created['id']}")
        for answer in (made, listed, read):
            assert "TOKENPART" not in answer.text  # a Slack url's token is its path
        assert created["url"] == "https://hooks.slack.com/services/T0…"
        for answer in (listed, read):
            assert answer.status_code == 200 and secret not in answer.text
        assert "secret" not in read.json() and "secret" not in listed.json()["data"][0]
        assert (
            listed.json()["count"] == 1 and listed.json()["data"][0]["secret_prefix"] == secret[:8]
        )
        assert read.json() == {k: v for k, v in created.items() if k != "secret"}


def test_webhooks_bad_requests_say_what_was_wrong_and_store_nothing(
    db_server: RunningServer,
) -> None:
    with _http(db_server) as http:
        cases = [
            ({"url": "ftp://example.com"}, ["body", "url"]),
            ({"url": "https://e.com", "format": "teams"}, ["body", "format"]),
            ({"url": "https://e.com", "min_severity": "high"}, ["body", "min_severity"]),
            ({"url": "https://e.com", "events": []}, ["body", "events"]),
            ({"url": "https://e.com", "secret": "mine"}, ["body", "secret"]),
            ({"url": "https://e\x06x.com/h"}, ["body", "url"]),  # http.client refuses it
        ]
        for body, loc in cases:
            answer = http.post("/webhooks", json=body)
            assert answer.status_code == 422, body
            assert answer.json()["detail"][0]["loc"] == loc, answer.text
        assert http.get("/webhooks").json()["count"] == 0
        hook = http.post("/webhooks", json={"url": "https://e.com/h"}).json()
        nulled = http.patch(f"/webhooks/{hook['id']}", json={"url": None, "enabled": None})
        assert nulled.status_code == 200  # null keeps a field as it is, as leaving it out does
        kept = http.get(f"/webhooks/{hook['id']}").json()
        assert (kept["url"], kept["enabled"]) == ("https://e.com/h", True)
        odd = http.post("/webhooks", json={"url": "https://[unclosed/x"})  # urllib cannot read it
        assert odd.status_code == 201 and odd.json()["url"].endswith("…")
        tried = http.post(f"/webhooks/{odd.json()['id']}/test")
        assert tried.status_code == 200 and tried.json()["delivered"] is False
        with db_server.session_factory() as session:  # a url stored before the pattern held
            session.get(StoredWebhook, odd.json()["id"]).url = "http://e\x06x.com/h"
            session.commit()
        tried = http.post(f"/webhooks/{odd.json()['id']}/test")
        assert tried.status_code == 200 and "InvalidURL" in tried.json()["response"], tried.text
        missing = http.delete("/webhooks/999999")
        assert missing.status_code == 404
        assert missing.json()["detail"] == "no webhook 999999; GET /api/v1/webhooks lists them"
        assert http.get("/webhooks/0").status_code == 422


def test_webhooks_alert_reaches_its_projects_hook_signed_and_linked(
    hooked: RunningServer, receiver: Receiver
) -> None:
    verify = _verify_snippet()
    with ReceiverServer() as elsewhere, _http(hooked) as http:
        mine = http.post("/webhooks", json={"url": receiver.url, "project": "grpo"}).json()
        http.post("/webhooks", json={"url": elsewhere.url, "project": "ppo"})
        run_id, alert = _nan_run(http, "grpo")
        (got,) = receiver.wait_for(1)
        wait_until(lambda: all(r.delivered_at for r in _outbox(hooked)), "delivery recorded")
        assert elsewhere.received == [] and len(_outbox(hooked)) == 1
    message = WebhookMessage.model_validate(got.body)
    assert (message.event, message.run.id, message.alert.id) == (
        "alert.opened",
        run_id,
        alert["id"],
    )
    lo, hi = max(0, alert["first_step"] - 50), alert["last_step"] + 50
    assert message.run_url == f"{PUBLIC_URL}/runs/{run_id}?from={lo}&to={hi}"
    headers = {k.lower(): v for k, v in got.headers.items()}
    assert headers["x-rlguard-event"] == "alert.opened"
    assert headers["x-rlguard-signature"].startswith("sha256=")
    args = (headers["x-rlguard-timestamp"], headers["x-rlguard-signature"], got.raw)
    assert verify(mine["secret"], *args) is True
    assert verify("another-secret", *args) is False
    assert verify(mine["secret"], args[0], args[1], got.raw + b" ") is False


def test_webhooks_changes_apply_to_the_next_message_without_restart(
    hooked: RunningServer, receiver: Receiver
) -> None:
    with ReceiverServer() as second, _http(hooked) as http:
        hook = http.post("/webhooks", json={"url": receiver.url, "min_severity": "critical"})
        hook_id = hook.json()["id"]
        _nan_run(http, "any")
        receiver.wait_for(1)
        changed = http.patch(f"/webhooks/{hook_id}", json={"url": second.url, "format": "discord"})
        assert changed.status_code == 200 and changed.json()["url"] == second.url
        run_id, _ = _nan_run(http, "any")
        (got,) = second.wait_for(1)
        assert len(receiver.received) == 1
        embed = got.body["embeds"][0]
        assert embed["url"].startswith(f"{PUBLIC_URL}/runs/{run_id}?from=")
        assert got.body["allowed_mentions"] == {"parse": []}
        assert "nonfinite" in embed["title"]
        http.patch(
            f"/webhooks/{hook_id}", json={"min_severity": "critical", "events": ["resolved"]}
        )
        _nan_run(http, "any")  # opened: not among the hook's events any more
        assert len(_outbox(hooked)) == 2 and len(second.received) == 1


def test_webhooks_disabled_hook_keeps_its_messages_and_delete_drops_them(
    db_url: str, receiver: Receiver
) -> None:
    """Rounds of delivery driven here, one at a time (the service's own worker waits an
    hour): messages of a failing receiver wait; a disabled hook's are not sent, a deleted
    hook's are gone, and the hook enabled again gets its message in its current format."""
    settings = _settings(db_url, poll_s=3600, backoff_s=0.001)
    app = create_app(settings)
    worker = WebhookWorker(app.state.session_factory, settings)
    with ServerThread(app) as thread, httpx.Client(base_url=thread.url + API) as http:
        server = RunningServer(url=thread.url, app=app, thread=thread)
        receiver.status = 503
        first = http.post("/webhooks", json={"url": receiver.url}).json()
        kept = http.post("/webhooks", json={"url": receiver.url}).json()
        _nan_run(http, "p")
        assert worker.deliver_due() == 0 and len(receiver.received) == 2
        assert [(r.hook_id, r.attempts) for r in _outbox(server)] == [
            (first["id"], 1),
            (kept["id"], 1),
        ]
        http.patch(f"/webhooks/{kept['id']}", json={"enabled": False, "format": "slack"})
        deleted = http.delete(f"/webhooks/{first['id']}")
        assert deleted.status_code == 200 and "secret" not in deleted.json()
        assert [r.hook_id for r in _outbox(server)] == [kept["id"]]
        assert http.get(f"/webhooks/{first['id']}").status_code == 404
        receiver.status = 200
        due = lambda: as_utc(_outbox(server)[0].next_attempt_at) <= utcnow()  # noqa: E731
        wait_until(due, "the retry to be due")
        assert worker.deliver_due() == 0 and len(receiver.received) == 2  # disabled: waits
        http.patch(f"/webhooks/{kept['id']}", json={"enabled": True})
        assert worker.deliver_due() == 1
    app.state.engine.dispose()
    assert len(receiver.received) == 3
    last = receiver.received[-1].body
    assert last["blocks"] and "open the run" in last["text"]
    (row,) = _outbox(server)
    assert row.delivered_at is not None and row.attempts == 2


def test_webhooks_test_action_answers_what_the_receiver_said(
    db_server: RunningServer, receiver: Receiver
) -> None:
    with _http(db_server) as http:
        hook = http.post("/webhooks", json={"url": receiver.url, "format": "slack"}).json()
        receiver.status, receiver.answer = 200, b"ok"
        sent = http.post(f"/webhooks/{hook['id']}/test")
        assert sent.status_code == 200, sent.text
        assert sent.json()["delivered"] is True and sent.json()["status_code"] == 200
        assert sent.json()["response"] == "ok"
        (got,) = receiver.received
        assert "test" in got.body["text"] and got.headers["X-Rlguard-Event"] == "test"
        receiver.status, receiver.answer = 410, b"no such hook"
        refused = http.post(f"/webhooks/{hook['id']}/test").json()
        assert (refused["delivered"], refused["status_code"]) == (False, 410)
        assert refused["response"] == "no such hook"
        gone = http.post("/webhooks", json={"url": "http://127.0.0.1:9/hook"}).json()
        unreachable = http.post(f"/webhooks/{gone['id']}/test").json()
        assert unreachable["delivered"] is False and unreachable["status_code"] is None
        assert "refused" in unreachable["response"].lower()
        assert _outbox(db_server) == []  # a test goes out at once, never through the outbox


def test_webhooks_server_wide_hook_of_the_settings_is_signed_too(
    sqlite_url: str, receiver: Receiver
) -> None:
    settings = Settings(
        database_url=sqlite_url,
        webhooks=[{"url": receiver.url, "secret": "from-the-env", "min_severity": "warn"}],
        webhook_poll_interval_s=0.02,
    )
    app = create_app(settings)
    with ServerThread(app) as thread, httpx.Client(base_url=thread.url + API) as http:
        assert http.get("/webhooks").json()["count"] == 0  # not managed over REST
        _nan_run(http, "p")
        (got,) = receiver.wait_for(1)
    app.state.engine.dispose()
    headers = {k.lower(): v for k, v in got.headers.items()}
    verify = _verify_snippet()
    assert verify(
        "from-the-env", headers["x-rlguard-timestamp"], headers["x-rlguard-signature"], got.raw
    )
    assert got.body["run_url"] is None  # no RLGUARD_PUBLIC_URL


def test_webhooks_concurrent_writes_beyond_threads_and_connections(sqlite_url: str) -> None:
    """48 clients at once add, change and delete hooks on a service of 2 write threads, 2 read
    threads and a pool of 7 connections: every request is answered and the table is exact."""
    settings = Settings(database_url=sqlite_url, write_threads=2, read_threads=2)
    app = create_app(settings)
    assert app.state.settings.db_pool_size == 7
    with ServerThread(app) as thread, httpx.Client(base_url=thread.url + API, timeout=60) as http:

        def add(i: int) -> int:
            made = http.post("/webhooks", json={"url": f"https://e.com/{i}", "project": f"p{i}"})
            assert made.status_code == 201, made.text
            return int(made.json()["id"])

        with ThreadPoolExecutor(48) as pool:
            ids = list(pool.map(add, range(48)))
        assert len(set(ids)) == 48

        def change_or_delete(pair: tuple[int, int]) -> int:
            i, hook_id = pair
            if i % 2:
                return http.delete(f"/webhooks/{hook_id}").status_code
            return http.patch(f"/webhooks/{hook_id}", json={"enabled": False}).status_code

        with ThreadPoolExecutor(48) as pool:
            assert set(pool.map(change_or_delete, enumerate(ids))) == {200}
        listed = http.get("/webhooks", timeout=30).json()
    app.state.engine.dispose()
    assert listed["count"] == 24
    assert {h["id"] for h in listed["data"]} == {h for i, h in enumerate(ids) if i % 2 == 0}
    assert not any(h["enabled"] for h in listed["data"])
    with app.state.session_factory() as session:
        assert len(list(session.scalars(select(StoredWebhook)))) == 24


def _doc_examples() -> dict[str, Any]:
    """The JSON examples of docs/reference/webhooks.md by their heading."""
    sections = re.findall(r"^#{3,4} (\w+)\n(.*?)(?=^#{2,4} )", DOCS.read_text(), re.S | re.M)
    found = {}
    for title, text in sections:
        code = re.search(r"```json\n(.*?)```", text, re.S)
        if code:
            found[title] = json.loads(code.group(1))
    return found


def test_webhooks_docs_examples_are_what_the_service_sends() -> None:
    """Each event's example is a valid WebhookMessage; the Slack and Discord examples are
    what a hook of that format receives for the opened example."""
    examples = _doc_examples()
    events = {name: examples[name]["event"] for name in ("Opened", "Escalated", "Resolved", "Test")}
    assert events == {
        "Opened": "alert.opened",
        "Escalated": "alert.escalated",
        "Resolved": "alert.resolved",
        "Test": "test",
    }
    for name in events:
        WebhookMessage.model_validate(examples[name])
    opened = examples["Opened"]
    assert examples["Slack"] == webhook_messages.render(opened, "slack")
    assert examples["Discord"] == webhook_messages.render(opened, "discord")
    for field in WebhookMessage.model_fields:
        assert f"| `{field}` |" in DOCS.read_text(), f"the message table lists {field}"


@pytest.mark.parametrize(
    ("name", "text_has", "text_lacks"),
    [
        ("<!channel> run", "&lt;!channel&gt; run", "<!channel>"),
        ("a & b", "a &amp; b", "a & b"),
        ("<https://evil.example|click>", "&lt;https://evil.example|click&gt;", "<https://evil"),
    ],
)
def test_webhooks_slack_message_escapes_run_names(
    name: str, text_has: str, text_lacks: str
) -> None:
    message = _doc_examples()["Opened"]
    message["run"]["name"] = name
    slack = webhook_messages.render(message, "slack")
    assert text_has in slack["text"] and text_lacks not in slack["text"]
    assert slack["text"].endswith(f"<{message['run_url']}|open the run>")
