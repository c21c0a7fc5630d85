"""The API's documentation pages in real headless Chromium, offline: every request they make
goes to the service itself (any other host is refused), and they still draw the operations."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

WAIT_MS = 20_000


def _offline(page: Any, base_url: str) -> list[str]:
    """Refuse every request to another host than the service's; the refused URLs."""
    own = urlsplit(base_url).netloc
    elsewhere: list[str] = []

    def route(request_route: Any) -> None:
        url = request_route.request.url
        if urlsplit(url).netloc == own:
            request_route.continue_()
        else:
            elsewhere.append(url)
            request_route.abort()

    page.route("**/*", route)
    return elsewhere


def test_swagger_ui_draws_the_operations_offline(dashboard: Any, page: Any) -> None:
    elsewhere = _offline(page, dashboard.url)
    page.goto(f"{dashboard.url}/docs")
    runs = page.locator(".opblock-summary-path", has_text="/api/v1/runs/{run_id}/series")
    runs.first.wait_for(timeout=WAIT_MS)
    assert page.locator(".opblock").count() >= 30
    assert page.locator(".opblock-summary-path", has_text="/api/v1/alerts").count() >= 1
    assert elsewhere == []
    assert page.console_errors == []


def test_redoc_draws_the_operations_offline(dashboard: Any, page: Any) -> None:
    elsewhere = _offline(page, dashboard.url)
    page.goto(f"{dashboard.url}/redoc")
    page.get_by_role("heading", name="Read Series").wait_for(timeout=WAIT_MS)
    assert page.get_by_role("heading", name="Read Run Alerts").count() == 1
    assert elsewhere == []
    assert page.locator("img[alt='redocly logo']").count() == 0  # the vendor's logo hid itself
    assert page.console_errors == []
