"""The runs page in real headless Chromium."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.conftest import new_run_id

WAIT_MS = 20_000


def test_runs_page_lists_runs_without_console_errors(
    dashboard: Any, page: Any, artifacts_dir: Path
) -> None:
    run_ids = [new_run_id("browser") for _ in range(2)]
    with httpx.Client(base_url=dashboard.url, timeout=10) as http:
        http.post("/api/v1/runs", json={"id": run_ids[0], "project": "vision", "name": "ppo-a"})
        http.post("/api/v1/runs", json={"id": run_ids[1], "project": "vision", "name": "grpo-b"})
        steps = [{"step": s, "values": {"actor/entropy": 1.0}} for s in range(42)]
        http.post(f"/api/v1/runs/{run_ids[1]}/batches", json={"batch_id": "b", "steps": steps})
    page.goto(dashboard.url + "/")
    for run_id in run_ids:
        page.get_by_text(run_id).wait_for(timeout=WAIT_MS)
    assert page.get_by_text("2 run(s)").is_visible()
    assert page.get_by_text("41", exact=True).is_visible()
    page.screenshot(path=str(artifacts_dir / "runs-page.png"), full_page=True)
    assert page.console_errors == []


def test_runs_page_shows_html_in_names_as_text(dashboard: Any, page: Any) -> None:
    run_id = new_run_id("xss")
    hostile = "<img src=x onerror=alert(1)><b>bold</b>"
    with httpx.Client(base_url=dashboard.url, timeout=10) as http:
        http.post("/api/v1/runs", json={"id": run_id, "project": "p", "name": hostile})
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(dashboard.url + "/")
    page.get_by_text(hostile).wait_for(timeout=WAIT_MS)
    assert page.locator("b", has_text="bold").count() == 0
    assert dialogs == []
    assert page.console_errors == []


def test_runs_page_live_picks_up_new_run(dashboard: Any, page: Any) -> None:
    page.goto(dashboard.url + "/")
    page.get_by_text("0 run(s)").wait_for(timeout=WAIT_MS)
    run_id = new_run_id("late")
    httpx.post(f"{dashboard.url}/api/v1/runs", json={"id": run_id, "project": "p"}, timeout=10)
    page.get_by_text(run_id).wait_for(timeout=WAIT_MS)
    assert page.get_by_text("1 run(s)").is_visible()
