"""Stop and checkpoint from the run page in real headless Chromium: the dialog names the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from rlguard_frontend.api_client import ApiError
from rlguard_frontend.chart_markers import MARKER_COLOURS
from rlguard_frontend.components import run_commands
from tests.conftest import new_run_id
from tests.frontend.helpers import WAIT_MS, graph_selector, seed_run
from tests.frontend.test_inbox_page import nan_run
from tests.support.browser import POLL_MS

LINES_JS = """el => el.layout.shapes.filter(s => s.yref === 'paper' && s.x0 === s.x1)
    .map(s => [s.x0, s.line.dash, s.line.color])"""


def test_run_page_stop_button_asks_naming_the_run_then_sends_one_stop(
    dashboard: Any, page: Any, artifacts_dir: Path
) -> None:
    run_id = new_run_id("stop")
    seed_run(dashboard.url, run_id, steps=20, name="grpo-seed3")
    questions: list[str] = []

    def answer(dialog: Any) -> None:
        questions.append(dialog.message)
        dialog.accept()

    page.on("dialog", answer)
    page.goto(f"{dashboard.url}/runs/{run_id}")
    page.click("#run-stop")
    page.get_by_text("stop asked (command").wait_for(timeout=WAIT_MS)
    assert questions == [
        f"Stop run 'grpo-seed3' ({run_id}) in project 'browser'? Its trainer ends training at "
        "its next check of run.should_stop."
    ]
    commands = httpx.get(f"{dashboard.url}/api/v1/runs/{run_id}/commands").json()["data"]
    assert [(c["kind"], c["state"]) for c in commands] == [("stop", "pending")]
    listed = page.locator("#run-commands tbody tr")
    listed.first.wait_for(timeout=WAIT_MS)  # the run's history, refreshed by the answer
    cells = listed.first.locator("td").all_inner_texts()
    assert cells[:4] == ["stop", "pending", "local (auth off)", ""]
    assert cells[4].endswith(f"UTC (step {commands[0]['requested_step']})")
    assert cells[5:] == ["—", "—"]
    page.screenshot(path=str(artifacts_dir / "run-stop.png"))
    page.click("#run-stop")
    page.get_by_text("Not sent: run").wait_for(timeout=WAIT_MS)
    assert "already has a stop waiting" in page.inner_text("#run-command-result")
    page.click("#run-checkpoint")
    page.get_by_text("checkpoint asked (command").wait_for(timeout=WAIT_MS)
    assert questions[-1].startswith("Checkpoint run 'grpo-seed3'")
    asked = httpx.get(f"{dashboard.url}/api/v1/runs/{run_id}/commands").json()["data"]
    assert [c["kind"] for c in asked] == ["stop", "checkpoint"]
    report = f"{dashboard.url}/api/v1/runs/{run_id}/commands/{asked[1]['id']}"
    httpx.patch(report, json={"delivered": True, "acted": True, "step": 19}).raise_for_status()
    acted = page.locator("#run-commands tbody tr", has_text="checkpoint")
    acted.locator("td", has_text="acted").wait_for(timeout=WAIT_MS)  # the tick re-reads it
    assert acted.locator("td").nth(6).inner_text().endswith("UTC (step 19)")
    step = asked[0]["requested_step"]
    page.reload()  # the page's plan reads the run's markers as it is drawn
    chart = graph_selector("entropy")
    page.wait_for_function(
        f"document.querySelector(`{chart}`)?.layout?.shapes?.length > 0",
        timeout=WAIT_MS,
        polling=POLL_MS,
    )
    lines = page.eval_on_selector(chart, LINES_JS)
    assert [step, "dash", MARKER_COLOURS["stop"]] in lines, lines
    assert [step, "dash", MARKER_COLOURS["checkpoint"]] in lines
    labels = page.eval_on_selector(
        chart, "el => el.layout.annotations.map(a => [a.text, a.hovertext])"
    )
    assert ["stop", f"stop by local (auth off) (step {step})"] in labels, labels
    assert ["ckpt", f"checkpoint by local (auth off) (step {step})"] in labels
    assert page.console_errors == []


def test_run_commands_refusals_read_as_sentences() -> None:
    read_only = ApiError("API answered 403", 403, "token 'viewer' has scope read")
    assert run_commands.refusal("stop", read_only) == (
        "You cannot stop runs: this dashboard's token can only read. Sign in with a token of "
        "write scope (rlguard token create --scope write)."
    )
    finished = ApiError("API answered 409", 409, "run 'r' is finished: no trainer is there")
    assert run_commands.refusal("checkpoint", finished) == (
        "Not sent: run 'r' is finished: no trainer is there"
    )
    assert run_commands.confirmation("stop", "r1", None, "p") == (
        "Stop run 'r1' in project 'p'? Its trainer ends training at its next check of "
        "run.should_stop."
    )


def test_inbox_stops_the_runs_of_ticked_alerts_naming_them(dashboard: Any, page: Any) -> None:
    first, second = nan_run(dashboard.url, "a", name="grpo-a"), nan_run(dashboard.url, "b")
    questions: list[str] = []

    def answer(dialog: Any) -> None:
        questions.append(dialog.message)
        dialog.accept()

    page.on("dialog", answer)
    page.goto(f"{dashboard.url}/alerts")
    page.get_by_text("2 open alert(s)").wait_for(timeout=WAIT_MS)
    page.click("#inbox-stop")
    page.get_by_text("Tick the alerts whose runs should stop.").wait_for(timeout=WAIT_MS)
    page.locator(".inbox-list label").filter(has_text="grpo-a").locator("input").check()
    page.click("#inbox-stop")
    page.get_by_text(f"'grpo-a' ({first}) in project 'a': stop asked (command").wait_for(
        timeout=WAIT_MS
    )
    assert questions == [
        f"Stop 1 run(s): 'grpo-a' ({first}) in project 'a'? Its trainer ends training at its "
        "next check of run.should_stop."
    ]
    [command] = httpx.get(f"{dashboard.url}/api/v1/runs/{first}/commands").json()["data"]
    alert = httpx.get(f"{dashboard.url}/api/v1/runs/{first}/alerts").json()["data"][0]
    assert command["alert_id"] == alert["id"]
    assert command["reason"] == f"from the inbox: critical nonfinite/{alert['key']}"
    assert httpx.get(f"{dashboard.url}/api/v1/runs/{second}/commands").json()["count"] == 0
    assert page.console_errors == []


def test_policies_page_adds_and_removes_a_projects_policy(dashboard: Any, page: Any) -> None:
    project = new_run_id("proj")
    page.goto(f"{dashboard.url}/policies?project={project}")
    page.get_by_text("No policy: this project's runs stop only").wait_for(timeout=WAIT_MS)
    page.fill("#policies-alert", "Not A Detector")
    page.click("#policies-add")
    page.get_by_text("Not done: String should match pattern").wait_for(timeout=WAIT_MS)
    page.fill("#policies-alert", "entropy_collapse")
    page.fill("#policies-steps", "20")
    page.get_by_label("dry run").check()
    page.click("#policies-add")
    page.get_by_text("Added #").wait_for(timeout=WAIT_MS)
    [policy] = httpx.get(f"{dashboard.url}/api/v1/projects/{project}/policies").json()["data"]
    assert (policy["alert"], policy["persist_steps"], policy["dry_run"]) == (
        "entropy_collapse",
        20,
        True,
    )
    row = page.locator(".policy-row")
    assert row.inner_text().startswith(
        f"#{policy['id']}: stop when entropy_collapse is critical or worse for 20 step(s) "
        "(dry run: recorded, not sent)"
    )
    row.get_by_text("remove").click()
    page.get_by_text(f"Removed policy #{policy['id']}.").wait_for(timeout=WAIT_MS)
    gone = httpx.get(f"{dashboard.url}/api/v1/projects/{project}/policies")
    assert gone.status_code == 404  # the project had no run: with no policy, none is known
    assert page.console_errors == []
