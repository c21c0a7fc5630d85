"""The webhooks settings page in real headless Chromium: add a hook, test it against a real
receiver, disable and delete it; a viewer without an admin token reads which one is needed."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rlguard_backend.core import auth
from rlguard_backend.core.config import Settings
from rlguard_backend.core.db import write_session
from rlguard_backend.detection.webhook_messages import signature
from rlguard_compose import start_background
from rlguard_frontend.pages.webhooks import NEEDS_ADMIN, PATH
from tests.webhook_receiver import Receiver, ReceiverServer

WAIT_MS = 20_000


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with ReceiverServer() as listening:
        yield listening


def test_webhooks_page_adds_tests_disables_and_deletes_a_hook(
    dashboard: Any, page: Any, receiver: Receiver, artifacts_dir: Path
) -> None:
    page.goto(dashboard.url + PATH)
    page.get_by_text("No webhooks yet").wait_for(timeout=WAIT_MS)
    page.fill("#webhooks-url", receiver.url)
    page.fill("#webhooks-project", "grpo")
    page.click("#webhooks-add")
    note = page.locator("#webhooks-secret")
    note.get_by_text("shown this once").wait_for(timeout=WAIT_MS)
    secret = re.search(r"once: ([0-9a-f]{64})", note.inner_text())
    assert secret, note.inner_text()
    (hook,) = httpx.get(f"{dashboard.url}/api/v1/webhooks").json()["data"]
    assert (hook["url"], hook["project"], hook["min_severity"]) == (receiver.url, "grpo", "warn")
    row = page.locator(f"#webhook-{hook['id']}")
    assert f"{secret.group(1)[:8]}…" in row.inner_text()
    row.get_by_role("button", name="test").click()
    page.get_by_text("Test delivered: the receiver answered 200").wait_for(timeout=WAIT_MS)
    (got,) = receiver.received
    timestamp = got.headers["X-Rlguard-Timestamp"]
    assert got.headers["X-Rlguard-Signature"] == signature(secret.group(1), int(timestamp), got.raw)
    assert got.body["event"] == "test" and got.body["run"]["project"] == "grpo"
    page.screenshot(path=str(artifacts_dir / "webhooks-page.png"), full_page=True)
    row.get_by_role("button", name="disable").click()
    row.locator(".webhook-state", has_text="disabled").wait_for(timeout=WAIT_MS)
    assert httpx.get(f"{dashboard.url}/api/v1/webhooks/{hook['id']}").json()["enabled"] is False
    row.get_by_role("button", name="delete").click()
    page.get_by_text("No webhooks yet").wait_for(timeout=WAIT_MS)
    assert httpx.get(f"{dashboard.url}/api/v1/webhooks").json()["count"] == 0
    assert page.console_errors == []


def test_webhooks_page_tells_a_read_only_viewer_the_scope_it_needs(
    sqlite_url: str, page: Any
) -> None:
    server = start_background("127.0.0.1", 0, Settings(database_url=sqlite_url, auth="on"))
    try:
        with write_session(server.app.state.session_factory) as session:
            token = auth.issue(session, "viewer", auth.Scope.read)[1]
            session.commit()
        page.goto(server.url + PATH)
        page.fill("#token", token)
        page.click("#sign-in")
        page.wait_for_url(server.url + PATH, timeout=WAIT_MS)
        status = page.locator("#webhooks-status")
        status.get_by_text("needs an admin token").wait_for(timeout=WAIT_MS)
        assert status.inner_text() == NEEDS_ADMIN
        assert page.console_errors == []
    finally:
        server.stop()
        server.app.state.engine.dispose()
