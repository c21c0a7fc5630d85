"""The alerts inbox in real headless Chromium: every run's open alerts, resolved in bulk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.conftest import new_run_id

WAIT_MS = 20_000


def nan_run(url: str, project: str, name: str | None = None) -> str:
    """A run whose NaN entropy opens a CRITICAL nonfinite alert."""
    run_id = new_run_id("inbox")
    run = {"id": run_id, "project": project, "name": name}
    httpx.post(f"{url}/api/v1/runs", json=run, timeout=30)
    steps = [{"step": s, "values": {"actor/entropy": "NaN"}} for s in range(12)]
    body = {"batch_id": "nan", "steps": steps}
    ack = httpx.post(f"{url}/api/v1/runs/{run_id}/batches", json=body, timeout=30).json()
    assert ack["alerts"], ack
    return run_id


def test_inbox_lists_open_alerts_of_every_project_and_resolves_in_bulk(
    dashboard: Any, page: Any, artifacts_dir: Path
) -> None:
    first, second = nan_run(dashboard.url, "a"), nan_run(dashboard.url, "b")
    page.goto(f"{dashboard.url}/alerts")
    page.get_by_text("2 open alert(s)").wait_for(timeout=WAIT_MS)
    rows = page.locator(".inbox-list label")
    assert rows.count() == 2
    assert {first, second} == {rows.nth(i).locator(".inbox-run").inner_text() for i in range(2)}
    page.screenshot(path=str(artifacts_dir / "alerts-inbox.png"), full_page=True)
    rows.filter(has_text=first).locator("input").check()
    page.click("#inbox-resolve")
    page.get_by_text("1 open alert(s)").wait_for(timeout=WAIT_MS)
    left = httpx.get(f"{dashboard.url}/api/v1/alerts", params={"status": "open"}).json()
    assert {a["run_id"] for a in left["data"]} == {second}
    page.locator(".inbox-list label .inbox-run").first.click()
    page.wait_for_url(f"{dashboard.url}/runs/{second}", timeout=WAIT_MS)
    assert page.console_errors == []
