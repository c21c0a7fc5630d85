"""The samples page in real headless Chromium: a step's samples, live, from an alert, as text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import new_run_id

WAIT_MS = 20_000
HOSTILE = "<img src=x onerror=alert(1)><b>bold</b>"
ROWS = "#samples-grid td[data-dash-column='index']"  # a row's first cell: the sample's index
COMPARED = "#samples-compare-grid td[data-dash-column='index']"


def post_samples(url: str, run_id: str, step: int, n: int, batch: str) -> None:
    rows = [
        {
            "step": step,
            "index": i,
            "prompt": f"what is {i} + {step}? {HOSTILE}",
            "response": f"answer {i + step}<eos>",
            "reward": float(i),
            "kl": 0.01 * i,
            "tokens": {"text": ["answer", f" {i + step}", "<eos>"], "kl": [0.0, 0.01 * i, 0.3]},
        }
        for i in range(n)
    ]
    body = {"batch_id": batch, "samples": rows}
    answer = httpx.post(f"{url}/api/v1/runs/{run_id}/samples", json=body, timeout=30)
    assert answer.status_code == 200, answer.text


def test_samples_page_shows_a_step_live_as_text(
    dashboard: Any, page: Any, artifacts_dir: Path
) -> None:
    run_id = new_run_id("samples")
    httpx.post(f"{dashboard.url}/api/v1/runs", json={"id": run_id, "project": "s"}, timeout=30)
    post_samples(dashboard.url, run_id, 1, 4, "b1")
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f"{dashboard.url}/runs/{run_id}/samples")
    page.get_by_text("step 1: 4 sample(s), by reward desc").wait_for(timeout=WAIT_MS)
    page.locator("#samples-tokens .token").first.wait_for(timeout=WAIT_MS)
    assert page.locator(ROWS).first.inner_text() == "3"  # best reward first
    assert HOSTILE in page.locator("#samples-prompt").inner_text()
    assert page.locator("b", has_text="bold").count() == 0 and dialogs == []
    assert page.locator("#samples-tokens .token").count() == 3
    assert page.locator("#samples-grid td", has_text="<b>bold</b>").count() == 0  # no markup
    page.locator(ROWS).nth(2).click()
    page.get_by_text("step 1 · sample 1").wait_for(timeout=WAIT_MS)
    post_samples(dashboard.url, run_id, 7, 2, "b7")  # the page follows the newest step
    page.get_by_text("step 7: 2 sample(s), by reward desc").wait_for(timeout=WAIT_MS)
    page.screenshot(path=str(artifacts_dir / "samples-page.png"), full_page=True)
    assert page.console_errors == []


def test_samples_open_from_an_alert_worst_first(dashboard: Any, page: Any) -> None:
    run_id = new_run_id("alert-samples")
    url = dashboard.url
    httpx.post(f"{url}/api/v1/runs", json={"id": run_id, "project": "s"}, timeout=30)
    steps = [{"step": s, "values": {"actor/entropy": "NaN"}} for s in range(12)]
    body = {"batch_id": "nan", "steps": steps}
    ack = httpx.post(f"{url}/api/v1/runs/{run_id}/batches", json=body, timeout=30).json()
    alert = ack["alerts"][0]
    assert alert["status"] == "open"
    post_samples(url, run_id, alert["first_step"], 3, "around")
    # past the alert's last refresh: still its steps while it is open (as its shading says)
    post_samples(url, run_id, alert["last_step"] + 5, 1, "later")
    page.goto(f"{url}/runs/{run_id}")
    page.locator(".alert-item").first.click()
    page.get_by_text("show samples").click()
    caption = f"since step {alert['first_step']}: 4 sample(s), by reward asc"
    page.get_by_text(caption).wait_for(timeout=WAIT_MS)
    page.locator(ROWS).first.wait_for(timeout=WAIT_MS)
    assert page.locator(ROWS).first.inner_text() == "0"
    assert page.console_errors == []


def test_samples_page_compares_two_runs_at_one_step(dashboard: Any, page: Any) -> None:
    url = dashboard.url
    ours, theirs = new_run_id("compare-a"), new_run_id("compare-b")
    for run_id, count in ((ours, 3), (theirs, 5)):
        httpx.post(f"{url}/api/v1/runs", json={"id": run_id, "project": "s"}, timeout=30)
        post_samples(url, run_id, 4, count, f"b-{run_id}")
    post_samples(url, theirs, 9, 2, "b-later")
    # from the address: the other run at the step shown
    page.goto(f"{url}/runs/{ours}/samples?step=4&compare_run={theirs}")
    heading = f"run {theirs} · step 4, to compare: 5 sample(s)"
    page.get_by_text(heading).wait_for(timeout=WAIT_MS)
    # ours is filled by a callback chained after the one that draws theirs: wait for both
    both_drawn = (
        f"document.querySelectorAll({json.dumps(COMPARED)}).length === 5"
        f" && document.querySelectorAll({json.dumps(ROWS)}).length === 3"
    )
    page.wait_for_function(both_drawn, timeout=WAIT_MS)
    beside = page.locator(COMPARED)
    assert beside.count() == 5 and page.locator(ROWS).count() == 3
    assert beside.last.inner_text() == "0"  # their sample 0: worst reward, last
    assert page.locator(".samples-compare b", has_text="bold").count() == 0
    # typed in: another step of that run, then a run that does not exist
    page.locator("#samples-compare-step").fill("9")
    page.locator("#samples-compare-step").press("Enter")
    page.get_by_text(f"run {theirs} · step 9, to compare: 2 sample(s)").wait_for(timeout=WAIT_MS)
    page.locator("#samples-compare-run").fill("no-such-run")
    page.locator("#samples-compare-run").press("Enter")
    page.get_by_text("run no-such-run · step 9, to compare").wait_for(timeout=WAIT_MS)
    assert "no-such-run" in page.locator(".samples-compare .error").inner_text()
    assert page.locator(ROWS).count() == 3  # our samples stay
    assert page.console_errors == []
