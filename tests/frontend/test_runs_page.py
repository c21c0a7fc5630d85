"""The runs page in real headless Chromium."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from benchmarks._dashboard_views import seed_table
from tests.conftest import new_run_id
from tests.support.browser import POLL_MS

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
    assert page.get_by_text("2 runs", exact=True).is_visible()
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
    page.get_by_text("0 runs", exact=True).wait_for(timeout=WAIT_MS)
    run_id = new_run_id("late")
    httpx.post(f"{dashboard.url}/api/v1/runs", json={"id": run_id, "project": "p"}, timeout=10)
    page.get_by_text(run_id).wait_for(timeout=WAIT_MS)
    assert page.get_by_text("1 run", exact=True).is_visible()


HOSTILE = "<img src=x onerror=alert(1)>"


def _config(i: int) -> dict[str, Any]:
    config = {"lr": (i + 1) * 1e-6, "kl_placement": "loss" if i % 2 else "reward"}
    return {**config, "kl_placement": HOSTILE, HOSTILE: "key"} if i == 7 else config


NAMES_JS = (
    "[...document.querySelectorAll(\".ag-center-cols-container .ag-row [col-id='name']\")]"
    ".sort((a, b) => a.closest('.ag-row').getAttribute('row-index')"
    " - b.closest('.ag-row').getAttribute('row-index')).map(c => c.innerText)"
)
FIRST_NAME_JS = f"{NAMES_JS}[0]"


def _grid_names(page: Any) -> list[str]:
    return list(page.evaluate(NAMES_JS))


def test_runs_grid_pages_sorts_and_filters_two_thousand_runs_on_the_server(
    dashboard: Any, page: Any, artifacts_dir: Path, sqlite_url: str
) -> None:
    seed_table(sqlite_url, 2000, new_run_id("sweep"), config_of=_config, name="run-{i:04d}")
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(dashboard.url + "/")
    page.get_by_text("2,000 runs", exact=True).wait_for(timeout=WAIT_MS)
    page.get_by_text("run-0000", exact=True).wait_for(timeout=WAIT_MS)
    assert len(_grid_names(page)) == 50  # one page of rows came, not 2,000
    page.get_by_text(HOSTILE, exact=True).wait_for(timeout=WAIT_MS)  # a config value, as text
    header = page.locator(".ag-header-cell[col-id='hparam.lr'] .ag-header-cell-label")
    header.click()
    page.wait_for_function(
        f"{FIRST_NAME_JS} === 'run-0000'", timeout=WAIT_MS, polling=POLL_MS
    )  # ascending
    header.click()
    page.wait_for_function(
        f"{FIRST_NAME_JS} === 'run-1999'", timeout=WAIT_MS, polling=POLL_MS
    )  # descending
    page.screenshot(path=str(artifacts_dir / "runs-grid-2000.png"), full_page=True)
    name_filter = page.locator(".ag-floating-filter[aria-colindex='3'] input")
    name_filter.fill("run-004")
    page.get_by_text("10 of 2,000 runs match", exact=True).wait_for(timeout=WAIT_MS)
    expected = [f"run-{i:04d}" for i in range(49, 39, -1)]
    page.wait_for_function(
        f"JSON.stringify({NAMES_JS}) === '{json.dumps(expected, separators=(',', ':'))}'",
        timeout=WAIT_MS,
        polling=POLL_MS,
    )
    assert _grid_names(page) == expected
    assert dialogs == []
    assert page.locator("img[src='x']").count() == 0
    assert page.console_errors == []
