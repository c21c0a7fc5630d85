"""Signing in to a dashboard whose API requires tokens, in real headless Chromium."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rlguard_backend import auth
from rlguard_backend.config import Settings
from rlguard_backend.db import write_session
from rlguard_compose import start_background
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
