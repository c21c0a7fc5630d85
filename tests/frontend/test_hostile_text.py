"""Hostile text on every page, in real headless Chromium: run names, tags, keys, configs, sample
texts and alert messages that look like HTML, script or markdown are shown as the text they
are; no dialog opens, no injected element exists, no injected script runs."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from rlguard_backend.core import auth
from rlguard_backend.core.config import Settings
from rlguard_backend.core.db import write_session
from rlguard_backend.models import Alert
from rlguard_compose import start_background
from rlguard_frontend import routing
from tests.conftest import new_run_id
from tests.support.browser import POLL_MS

WAIT_MS = 30_000
SCRIPT = "<script id=pwn-script>window.__pwned = 1</script>"
IMAGE = '<img id=pwn-img src=x onerror="window.__pwned = 1">'
LINK = "[pwn-link](javascript:window.__pwned=1)"
MARKDOWN = "**pwn-bold** <b id=pwn-b>b</b> # pwn-heading"
HOSTILE = (SCRIPT, IMAGE, LINK, MARKDOWN)
KEY = f"custom/{IMAGE}"
# What an injection would leave: its elements, a javascript: link, markdown turned into markup.
INJECTED_JS = """() => ({
    pwned: window.__pwned === 1,
    elements: document.querySelectorAll('#pwn-script, #pwn-img, #pwn-b').length,
    links: [...document.querySelectorAll('a[href]')]
        .filter(a => a.getAttribute('href').trim().toLowerCase().startsWith('javascript')).length,
    bold: [...document.querySelectorAll('strong, b')]
        .filter(e => e.textContent.includes('pwn-bold')).length,
})"""
CHARTS_DRAWN_JS = """() => { const plots = [...document.querySelectorAll('.js-plotly-plot')];
    return plots.some(p => p.data && p.data.length > 0 && p.querySelector(".main-svg")); }"""
CLEAN = {"pwned": False, "elements": 0, "links": 0, "bold": 0}


@pytest.fixture
def signed_in(sqlite_url: str) -> Iterator[tuple[Any, dict[str, str]]]:
    """``rlguard up`` with auth on, an admin token to seed it and a read token to view it."""
    server = start_background("127.0.0.1", 0, Settings(database_url=sqlite_url, auth="on"))
    with write_session(server.app.state.session_factory) as session:
        tokens = {s.name: auth.issue(session, f"hostile-{s.name}", s)[1] for s in auth.Scope}
        session.commit()
    yield server, tokens
    server.stop()
    server.app.state.engine.dispose()


def _seed(url: str, token: str) -> tuple[str, str]:
    """Two runs carrying hostile text everywhere a user's text goes; the first has samples."""
    first, second = new_run_id("hostile"), new_run_id("hostile")
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=f"{url}/api/v1", headers=headers, timeout=30) as http:
        for index, (run_id, name) in enumerate(((first, IMAGE), (second, SCRIPT))):
            config = {"lr": 1e-3 * (index + 1), IMAGE: SCRIPT, "note": LINK, "text": MARKDOWN}
            body = {"id": run_id, "project": LINK, "name": name, "config": config}
            http.post("/runs", json={**body, "tags": [SCRIPT, LINK]}).raise_for_status()
            steps = [
                {"step": s, "values": {"actor/entropy": 1.0 - s / 100, KEY: math.sin(s)}}
                for s in range(40)
            ]
            http.post(f"/runs/{run_id}/batches", json={"batch_id": "a", "steps": steps})
        samples = [
            {"step": 10, "index": i, "prompt": SCRIPT, "response": f"{IMAGE} {LINK} {MARKDOWN}"}
            for i in range(2)
        ]
        body = {"batch_id": "s", "samples": samples}
        http.post(f"/runs/{first}/samples", json=body).raise_for_status()
    return first, second


def _hostile_alert(server: Any, run_id: str) -> None:
    """An open CRITICAL alert whose message and evidence carry hostile text (a detector's
    message names signals, not the user's keys, so it is written as the store would)."""
    alert = Alert(
        run_id=run_id,
        detector="nonfinite",
        key=KEY[:128],
        severity="critical",
        first_step=20,
        last_step=22,
        message=f"{IMAGE} {LINK} {MARKDOWN}",
        evidence={IMAGE: SCRIPT},
        advice=[LINK],
    )
    with write_session(server.app.state.session_factory) as session:
        session.add(alert)
        session.commit()


def _shows_literally(page: Any, text: str) -> None:
    page.get_by_text(text, exact=False).first.wait_for(timeout=WAIT_MS)


def _visit(page: Any, url: str, path: str, text: str, artifacts_dir: Path, charts: bool) -> None:
    """Open a page, wait for ``text`` and its charts, check nothing was injected, keep a picture."""
    page.goto(url + path)
    _shows_literally(page, text)
    if charts:  # legends, hover and marker labels are drawn in SVG
        page.wait_for_function(CHARTS_DRAWN_JS, timeout=WAIT_MS, polling=POLL_MS)
    assert page.evaluate(INJECTED_JS) == CLEAN, path
    name = re.sub(r"\W+", "-", path.split("?")[0]).strip("-") or "runs"
    page.screenshot(path=str(artifacts_dir / f"hostile-{name[:40]}.png"))


def test_hostile_text_shows_as_text_on_every_page(
    signed_in: tuple[Any, dict[str, str]], page: Any, artifacts_dir: Path
) -> None:
    server, tokens = signed_in
    first, second = _seed(server.url, tokens["admin"])
    _hostile_alert(server, first)
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(f"{server.url}/login?next={quote('/' + SCRIPT)}")
    page.fill("#token", f"{IMAGE}{SCRIPT}")
    page.click("#sign-in")
    page.locator("#error").wait_for(timeout=WAIT_MS)
    assert page.evaluate(INJECTED_JS) == CLEAN, "sign-in"
    page.fill("#token", tokens["read"])
    page.click("#sign-in")
    views = [
        ("/", IMAGE),  # the runs grid: names
        (f"/runs/{first}", IMAGE),  # the run page: title, tags, config chips, mini chart keys
        (f"/compare?runs={first},{second}", SCRIPT),  # legend, deltas, config diff
        (f"/compare?runs={first},{second}&group=config.lr", IMAGE),  # bands
        ("/alerts", IMAGE),  # the inbox: alert messages
        (f"/runs/{first}/samples?step=10", SCRIPT),  # the samples: prompts, responses
    ]
    for path, text in views:
        _visit(page, server.url, path, text, artifacts_dir, routing.draws_charts(path))
        if path.endswith("samples?step=10"):  # a sample's response, markdown left as typed
            _shows_literally(page, LINK)
            _shows_literally(page, MARKDOWN)
    # pages of no run: the path or id typed in the address bar comes back in their text
    for path, text in ((f"/{SCRIPT}", SCRIPT), (f"/runs/{IMAGE}", IMAGE)):  # not found; no run
        for where in (path, f"{path}/samples"):
            _visit(page, server.url, where, text, artifacts_dir, charts=False)
    assert dialogs == []
    assert page.console_errors == []
