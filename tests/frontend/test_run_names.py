"""Runs named by name in the dashboard, in real headless Chromium: URLs, the inbox, samples."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from tests.conftest import new_run_id
from tests.frontend.helpers import seed_run
from tests.frontend.test_inbox_page import nan_run
from tests.frontend.test_samples_page import post_samples

WAIT_MS = 20_000


def test_run_pages_open_by_name_and_by_project_and_name(dashboard: Any, page: Any) -> None:
    run_id, name = new_run_id("id"), new_run_id("collapse seed0")
    seed_run(dashboard.url, run_id, steps=20, name=name)  # project "browser"
    post_samples(dashboard.url, run_id, 3, 2, "b3")
    page.goto(f"{dashboard.url}/runs/{quote(name)}")
    page.locator(".run-title", has_text=name).wait_for(timeout=WAIT_MS)
    assert page.locator(".run-header code").inner_text() == run_id
    page.goto(f"{dashboard.url}/runs/browser/{quote(name)}/samples")
    page.get_by_text("step 3: 2 sample(s), by reward desc").wait_for(timeout=WAIT_MS)
    title = page.locator("#samples-title")
    assert title.inner_text() == f"Samples of {name} · browser"
    assert title.locator("a").get_attribute("href") == f"/runs/{run_id}"
    assert page.console_errors == []


def test_run_page_of_a_shared_name_lists_the_runs(dashboard: Any, page: Any) -> None:
    name = new_run_id("shared")
    ids = [new_run_id(project) for project in ("p1", "p2")]
    for run_id, project in zip(ids, ("p1", "p2"), strict=True):
        body = {"id": run_id, "project": project, "name": name}
        assert httpx.post(f"{dashboard.url}/api/v1/runs", json=body, timeout=30).is_success
    page.goto(f"{dashboard.url}/runs/{name}")
    why = page.locator("#not-found-why")
    why.wait_for(timeout=WAIT_MS)
    assert why.inner_text().startswith(f"2 runs are named '{name}': ")
    assert all(run_id in why.inner_text() for run_id in ids)
    page.goto(f"{dashboard.url}/runs/p2/{name}")
    page.locator(".run-header code", has_text=ids[1]).wait_for(timeout=WAIT_MS)
    page.goto(f"{dashboard.url}/runs/no-such-run")
    page.get_by_text("no run has the id or name 'no-such-run'").wait_for(timeout=WAIT_MS)


def test_inbox_rows_name_the_run_and_its_project(dashboard: Any, page: Any) -> None:
    unnamed = nan_run(dashboard.url, "inbox-project")
    named = new_run_id("named")
    httpx.patch(f"{dashboard.url}/api/v1/runs/{unnamed}", json={"name": named}, timeout=30)
    page.goto(f"{dashboard.url}/alerts")
    page.get_by_text("1 open alert(s)").wait_for(timeout=WAIT_MS)
    row = page.locator(".inbox-list label")
    assert row.locator(".inbox-run").inner_text() == named
    assert row.locator(".inbox-project").inner_text() == "inbox-project"
    row.locator(".inbox-run").click()
    page.wait_for_url(f"{dashboard.url}/runs/{unnamed}", timeout=WAIT_MS)
    assert page.console_errors == []
