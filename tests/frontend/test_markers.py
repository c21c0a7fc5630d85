"""Markers on every chart of the run page, and tick labels a constant line can be read by."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from rlguard_backend.core.db import write_session
from rlguard_backend.models import Alert
from tests.conftest import new_run_id
from tests.frontend.helpers import WAIT_MS, graph_selector, seed_run
from tests.support.browser import POLL_MS

SHAPES_JS = """el => (el.layout.shapes || []).filter(s => s.yref === 'paper' && s.x0 === s.x1)
    .map(s => [s.x0, s.line.dash])"""


def test_run_page_marks_restarts_rewinds_lr_changes_and_alerts_on_every_chart(
    dashboard: Any, page: Any, artifacts_dir: Path
) -> None:
    run_id = new_run_id("marks")
    seed_run(dashboard.url, run_id, extra_keys={"actor/lr": 3e-3})
    with httpx.Client(base_url=dashboard.url, timeout=30) as http:
        later = [{"step": s, "values": {"actor/lr": 1e-3}} for s in range(300, 400)]
        http.post(f"/api/v1/runs/{run_id}/batches", json={"batch_id": "lr", "steps": later})
        http.post(f"/api/v1/runs/{run_id}/rewind", json={"resume_from_step": 350})
    with write_session(dashboard.app.state.session_factory) as session:
        alert = Alert(
            run_id=run_id,
            detector="entropy_collapse",
            severity="critical",
            first_step=120,
            last_step=130,
            message="m",
        )
        session.add(alert)
        session.commit()
    page.goto(f"{dashboard.url}/runs/{run_id}")
    for panel in ("kl", "clip", "entropy", "reward"):
        page.wait_for_function(
            f"document.querySelector(`{graph_selector(panel)}`)?.data?.length > 0",
            timeout=WAIT_MS,
            polling=POLL_MS,
        )
        lines = page.eval_on_selector(graph_selector(panel), SHAPES_JS)
        assert [300, "dash"] in lines, (panel, lines)  # the learning rate dropped
        assert [350, "dash"] in lines  # rewound
        assert [120, "dot"] in lines  # the alert, on every panel
    labels = page.eval_on_selector(
        graph_selector("kl"), "el => el.layout.annotations.map(a => a.hovertext)"
    )
    assert "lr 0.003 → 0.001 (step 300)" in labels and "rewind (step 350)" in labels
    page.screenshot(path=str(artifacts_dir / "run-page-markers.png"), full_page=True)
    assert page.console_errors == []


def test_constant_learning_rate_ticks_are_whole_and_inside_the_chart(
    dashboard: Any, page: Any
) -> None:
    run_id = new_run_id("flat")
    seed_run(dashboard.url, run_id, extra_keys={"custom/lr_constant": 3e-3})
    page.goto(f"{dashboard.url}/runs/{run_id}?pick=custom/lr_constant")  # drawn with the page
    chart = graph_selector("k0")
    page.wait_for_function(
        f"document.querySelector(`{chart}`)?.querySelectorAll('.ytick text').length > 1",
        timeout=WAIT_MS,
        polling=POLL_MS,
    )
    ticks = page.eval_on_selector(
        chart,
        """el => [...el.querySelectorAll('.ytick text')].map(t => ({
            text: t.textContent, left: t.getBoundingClientRect().left,
            chart: el.getBoundingClientRect().left}))""",
    )
    values = [float(t["text"].replace("−", "-")) for t in ticks]
    assert 3e-3 in values or any(abs(v - 3e-3) < 1e-4 for v in values)
    assert all(len(t["text"]) <= 7 for t in ticks), ticks  # 0.0025, not 0.0030000001
    assert all(t["left"] >= t["chart"] for t in ticks), ticks  # not cut at the chart's edge
    assert page.console_errors == []
