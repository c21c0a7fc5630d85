"""Signing in to a dashboard whose API requires tokens, in real headless Chromium."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rlguard_backend.core import auth, migrate
from rlguard_backend.core.config import Settings
from rlguard_backend.core.db import make_engine, make_session_factory, write_session
from rlguard_compose import start_background
from rlguard_frontend import ids
from rlguard_frontend.api_client import ApiClient
from rlguard_frontend.components.alert_views import READ_ONLY
from rlguard_frontend.pages import inbox, policies
from rlguard_frontend.signin import safe_next
from tests.conftest import new_run_id

WAIT_MS = 20_000


@pytest.fixture
def guarded(sqlite_url: str) -> Iterator[tuple[Any, dict[str, str]]]:
    """``rlguard up`` with auth on, and a token of each scope."""
    server = start_background("127.0.0.1", 0, Settings(database_url=sqlite_url, auth="on"))
    tokens = {}
    with write_session(server.app.state.session_factory) as session:
        for scope in auth.Scope:
            tokens[scope.name] = auth.issue(session, f"viewer-{scope.name}", scope)[1]
        session.commit()
    yield server, tokens
    server.stop()
    server.app.state.engine.dispose()


def test_sign_in_read_token_opens_the_runs_page_and_sign_out_closes_it(
    guarded: tuple[Any, dict[str, str]], page: Any, artifacts_dir: Path
) -> None:
    server, tokens = guarded
    run_id = new_run_id("signed")
    admin = {"Authorization": f"Bearer {tokens['admin']}"}
    created = httpx.post(
        f"{server.url}/api/v1/runs", json={"id": run_id, "project": "p"}, headers=admin
    )
    assert created.status_code == 201
    page.goto(server.url + "/")
    assert page.url.startswith(server.url + "/login")
    page.fill("#token", "rlg_00000000_" + "x" * 43)
    page.click("#sign-in")
    page.get_by_text("unknown or revoked").wait_for(timeout=WAIT_MS)
    page.screenshot(path=str(artifacts_dir / "sign-in.png"))
    page.fill("#token", tokens["read"])
    page.click("#sign-in")
    page.get_by_text(run_id).wait_for(timeout=WAIT_MS)
    cookie = next(c for c in page.context.cookies() if c["name"] == "rlguard_session")
    assert (cookie["httpOnly"], cookie["sameSite"]) == (True, "Strict")
    assert page.evaluate("document.cookie").find("rlguard_session") == -1
    page.click("#app-sign-out")
    page.wait_for_url(server.url + "/login", timeout=WAIT_MS)
    page.goto(server.url + "/")
    assert page.url.startswith(server.url + "/login")
    assert page.console_errors == []


def test_sign_in_callbacks_without_the_cookie_are_refused(
    guarded: tuple[Any, dict[str, str]],
) -> None:
    server, _ = guarded
    answer = httpx.post(f"{server.url}/_dash-update-component", json={}, timeout=10)
    assert answer.status_code == 401
    assert httpx.get(f"{server.url}/_dash-layout", timeout=10).status_code == 302


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("/run/abc?x=1", "/run/abc?x=1"),
        ("//evil.example/x", "/"),
        ("https://evil.example/", "/"),
        ("/\\evil.example", "/"),
        (None, "/"),
    ],
)
def test_sign_in_next_stays_on_this_dashboard(target: str | None, expected: str) -> None:
    assert safe_next(target, "/") == expected


def sso_dashboard(sqlite_url: str, proxies: str) -> Any:
    """``rlguard up`` behind an SSO proxy at ``proxies`` that sets X-Forwarded-User."""
    settings = Settings(
        database_url=sqlite_url,
        auth="on",
        identity_header="X-Forwarded-User",
        trusted_proxies=proxies,
    )
    return start_background("127.0.0.1", 0, settings)


def test_sign_in_sso_header_from_the_proxy_opens_the_dashboard(
    sqlite_url: str, browser: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From the trusted proxy the header signs the viewer in (the dashboard's own token reads
    the API); from any other address the same header is ignored."""
    engine = make_engine(sqlite_url)
    migrate.upgrade(engine)
    with write_session(make_session_factory(engine)) as session:
        token = auth.issue(session, "dashboard", auth.Scope.write)[1]
        session.commit()
    engine.dispose()
    monkeypatch.setenv("RLGUARD_TOKEN", token)
    run_id = new_run_id("sso")
    server = sso_dashboard(sqlite_url, "127.0.0.1")
    try:
        header = {"Authorization": f"Bearer {token}"}
        created = httpx.post(
            f"{server.url}/api/v1/runs", json={"id": run_id, "project": "p"}, headers=header
        )
        assert created.status_code == 201
        context = browser.new_context(extra_http_headers={"X-Forwarded-User": "ada@example.com"})
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(server.url + "/")
        page.get_by_text(run_id).wait_for(timeout=WAIT_MS)
        assert not page.url.startswith(server.url + "/login") and errors == []
        page.on("dialog", lambda dialog: dialog.accept())
        page.goto(f"{server.url}/runs/{run_id}")
        page.click("#run-stop")  # asked with the dashboard's token, on ada's behalf
        page.get_by_text("stop asked (command").wait_for(timeout=WAIT_MS)
        commands = httpx.get(f"{server.url}/api/v1/runs/{run_id}/commands", headers=header)
        assert [c["requested_by"] for c in commands.json()["data"]] == [
            "ada@example.com (via dashboard)"
        ]
        assert errors == []
        context.close()
        unsigned = httpx.get(f"{server.url}/", timeout=10)
        assert unsigned.status_code == 302 and "/login" in unsigned.headers["location"]
    finally:
        server.stop()
        server.app.state.engine.dispose()
    server = sso_dashboard(sqlite_url, "10.0.0.0/8")  # the proxy is elsewhere
    try:
        spoofed = httpx.get(
            f"{server.url}/", headers={"X-Forwarded-User": "ada@example.com"}, timeout=10
        )
        assert spoofed.status_code == 302 and "/login" in spoofed.headers["location"]
    finally:
        server.stop()
        server.app.state.engine.dispose()


def test_sign_in_sso_needs_a_dashboard_token_and_both_settings(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RLGUARD_TOKEN", raising=False)
    with pytest.raises(ValueError, match="set RLGUARD_TOKEN"):
        sso_dashboard(sqlite_url, "127.0.0.1")
    with pytest.raises(ValueError, match="go together"):
        Settings(identity_header="X-Forwarded-User")


def test_sign_in_cross_site_posts_are_refused(guarded: tuple[Any, dict[str, str]]) -> None:
    """Another site's page cannot make a signed-in browser change state (acknowledge, resolve):
    its Origin names the other site."""
    server, tokens = guarded
    cookies = {"rlguard_session": tokens["write"]}
    update = f"{server.url}/_dash-update-component"
    evil = httpx.post(update, json={}, cookies=cookies, headers={"Origin": "https://evil.example"})
    assert evil.status_code == 403 and "cross-site" in evil.json()["detail"]
    own = httpx.post(update, json={}, cookies=cookies, headers={"Origin": server.url})
    assert own.status_code != 403
    login = httpx.post(f"{server.url}/login", data={"token": "x"}, headers={"Origin": "null"})
    assert login.status_code == 403


def _nan_run(server: Any, admin_token: str) -> tuple[str, int]:
    """A run whose NaN entropy opens an alert, made with the admin token; (run id, alert id)."""
    run_id = new_run_id("read-only")
    with httpx.Client(
        base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {admin_token}"}
    ) as http:
        assert http.post("/runs", json={"id": run_id, "project": "p"}).status_code == 201
        steps = [{"step": s, "values": {"actor/entropy": "NaN"}} for s in range(12)]
        ack = http.post(f"/runs/{run_id}/batches", json={"batch_id": "nan", "steps": steps})
    return run_id, ack.json()["alerts"][0]["id"]


def _sign_in(page: Any, server: Any, token: str, path: str) -> None:
    page.goto(server.url + path)
    page.fill("#token", token)
    page.click("#sign-in")
    page.wait_for_url(server.url + path, timeout=WAIT_MS)


def test_sign_in_read_token_sees_no_alert_actions_but_a_sentence(
    guarded: tuple[Any, dict[str, str]], page: Any
) -> None:
    server, tokens = guarded
    run_id, alert_id = _nan_run(server, tokens["admin"])
    _sign_in(page, server, tokens["read"], "/alerts")
    page.get_by_text("1 open alert(s)").wait_for(timeout=WAIT_MS)
    assert page.locator("#inbox-acknowledge").is_hidden()
    assert page.locator("#inbox-resolve").is_hidden()
    assert page.locator("#inbox-read-only").inner_text() == READ_ONLY
    assert page.locator("#inbox-stop").is_hidden()
    page.goto(f"{server.url}/runs/{run_id}")
    page.locator(".alert-item").first.click()
    assert page.locator("#run-stop").is_hidden() and page.locator("#run-checkpoint").is_hidden()
    detail = page.locator("#run-alert-detail")
    detail.locator(".read-only").wait_for(timeout=WAIT_MS)
    assert detail.locator("button").count() == 0
    assert detail.locator(".read-only").inner_text() == READ_ONLY
    assert page.console_errors == []
    status = httpx.get(
        f"{server.url}/api/v1/alerts/{alert_id}/samples",
        headers={"Authorization": f"Bearer {tokens['read']}"},
    )
    assert status.status_code == 200  # the alert is there, only the actions are withheld
    rule = {"alert": "nonfinite", "severity": "warn"}
    added = httpx.post(
        f"{server.url}/api/v1/projects/p/policies",
        json=rule,
        headers={"Authorization": f"Bearer {tokens['admin']}"},
    )
    assert added.status_code == 201, added.text
    page.goto(f"{server.url}/policies?project=p")
    page.locator(".policy-row").get_by_text("when nonfinite is warn").wait_for(timeout=WAIT_MS)
    assert page.locator(".policy-row button").count() == 0
    assert page.locator("#policies-add").is_hidden()
    assert page.locator("#policies-read-only").inner_text() == policies.READ_ONLY
    assert page.console_errors == []


def test_sign_in_write_token_acknowledges_from_the_run_page(
    guarded: tuple[Any, dict[str, str]], page: Any
) -> None:
    server, tokens = guarded
    run_id, alert_id = _nan_run(server, tokens["admin"])
    _sign_in(page, server, tokens["write"], f"/runs/{run_id}")
    page.locator(".alert-item").first.click()
    assert page.locator("#run-stop").is_visible()  # hidden only from a read-only viewer
    page.click("#run-alert-detail button:has-text('acknowledge')")
    page.locator("#run-alert-detail button", has_text="acknowledge").wait_for(
        state="detached", timeout=WAIT_MS
    )
    assert page.locator("#run-alert-detail .read-only").count() == 0
    answer = httpx.get(
        f"{server.url}/api/v1/runs/{run_id}/alerts",
        headers={"Authorization": f"Bearer {tokens['read']}"},
    )
    assert [a["acknowledged"] for a in answer.json()["data"] if a["id"] == alert_id] == [True]
    assert page.console_errors == []


def test_inbox_action_refused_by_the_api_says_so_in_a_sentence(
    guarded: tuple[Any, dict[str, str]],
) -> None:
    """A read token's resolve (a page drawn before its token changed) is answered 403: the
    inbox shows the sentence, not the API's JSON."""
    server, tokens = guarded
    _, alert_id = _nan_run(server, tokens["admin"])
    client = ApiClient(f"{server.url}/api", token=tokens["read"])
    options, ticked, count, error = inbox.show_inbox(
        client, {ids.INBOX_RESOLVE}, ["critical", "warn"], [alert_id], []
    )
    assert (options, ticked, count, error) == ([], [alert_id], "", READ_ONLY)
    assert client.can_write() is False
    assert ApiClient(f"{server.url}/api", token=tokens["write"]).can_write() is True
