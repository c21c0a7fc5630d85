"""Browser fixtures: Debian's Chromium driven by Playwright, and the combined API + dashboard."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from benchmarks.dashboard import CHROMIUM, CHROMIUM_ARGS
from rlguard_backend.core.config import Settings
from rlguard_compose import start_background


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A page that records console errors in ``page.console_errors``."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    new_page = context.new_page()
    errors: list[str] = []
    new_page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    new_page.on("pageerror", lambda exc: errors.append(str(exc)))
    new_page.console_errors = errors
    yield new_page
    context.close()


@pytest.fixture
def dashboard(sqlite_url: str) -> Iterator[Any]:
    """API and dashboard on one real port, as ``rlguard up`` serves them."""
    server = start_background("127.0.0.1", 0, Settings(database_url=sqlite_url))
    yield server
    server.stop()
    server.app.state.engine.dispose()
