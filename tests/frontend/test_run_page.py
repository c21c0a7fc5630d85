"""The run page in real headless Chromium: panels, live updates, alerts, hostile names."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import rlguard
from rlguard_backend.models import Alert
from tests.conftest import new_run_id
from tests.frontend.helpers import WAIT_MS, graph_selector, plot_state, seed_run
from tests.support.browser import POLL_MS


def test_run_page_draws_registry_panels_without_console_errors(
    dashboard: Any, page: Any, artifacts_dir: Path
) -> None:
    run_id = new_run_id("panels")
    seed_run(dashboard.url, run_id, extra_keys={"custom/my_metric": 3.0})
    page.goto(f"{dashboard.url}/runs/{run_id}")
    for panel in ("kl", "clip", "entropy", "reward", "k0"):
        page.wait_for_selector(graph_selector(panel), timeout=WAIT_MS)
    page.wait_for_function(
        f"document.querySelector(`{graph_selector('entropy')}`).data.length > 0",
        timeout=WAIT_MS,
        polling=POLL_MS,
    )
    entropy = plot_state(page, "entropy")
    assert entropy["lengths"] == [300, 0]  # the line, the empty alert slot
    assert any(text.startswith("start 1.1") for text in entropy["annotations"]), entropy[
        "annotations"
    ]
    assert "50 % of start" in entropy["annotations"]
    assert plot_state(page, "kl")["annotations"] == []  # target is for KL to the reference
    assert page.get_by_text("No data: this run logs none of grad_norm.").is_visible()
    assert page.get_by_text("custom/my_metric").is_visible()
    page.screenshot(path=str(artifacts_dir / "run-page.png"), full_page=True)
    page.click("#app-theme-toggle")
    page.wait_for_function(
        f"document.querySelector(`{graph_selector('k0')}`).layout.paper_bgcolor === '#161b22'",
        timeout=WAIT_MS,
        polling=POLL_MS,
    )
    assert plot_state(page, "entropy")["lengths"] == [300, 0]  # the line, the empty alert slot
    page.screenshot(path=str(artifacts_dir / "run-page-dark.png"), full_page=True)
    assert page.console_errors == []


def test_run_page_last_step_advances_while_trainer_logs(
    dashboard: Any, page: Any, tmp_path: Path
) -> None:
    run_id = new_run_id("live")
    run = rlguard.init(
        project="browser",
        run_id=run_id,
        url=dashboard.url,
        spool_dir=str(tmp_path),
        gpu=False,
        flush_interval_s=0.1,
    )
    stop = threading.Event()

    def train() -> None:
        step = 0
        while not stop.is_set():
            run.log({"actor/entropy": 1.0 / (1 + step / 50), "actor/ppo_kl": 0.001}, step=step)
            step += 1
            stop.wait(0.05)  # the trainer's own pace: ~20 steps a second

    trainer = threading.Thread(target=train, daemon=True)
    trainer.start()
    try:
        page.goto(f"{dashboard.url}/runs/{run_id}")
        entropy = f"document.querySelector(`{graph_selector('entropy')}`)"
        page.wait_for_function(
            f"({entropy}?.data?.[0]?.x?.length ?? 0) > 0",
            timeout=WAIT_MS,
            polling=POLL_MS,
        )
        first = plot_state(page, "entropy")["lastX"]
        # live points arrive through extendData: the drawn line grows past what was first drawn
        page.wait_for_function(
            f"{entropy}.data[0].x.at(-1) > {first + 20}",
            timeout=WAIT_MS,
            polling=POLL_MS,
        )
        last_step = "document.querySelector('#run-last-step').innerText"
        # the page may have opened before the first batch landed ("—"): the header catches up
        page.wait_for_function(f"/^[0-9]+$/.test({last_step})", timeout=WAIT_MS, polling=POLL_MS)
        shown = int(page.inner_text("#run-last-step"))
        page.wait_for_function(
            f"Number(document.querySelector('#run-last-step').innerText) > {shown}",
            timeout=WAIT_MS,
            polling=POLL_MS,
        )
        state = plot_state(page, "entropy")
        assert state["lengths"][0] == len(
            set(page.eval_on_selector(graph_selector("entropy"), "el => el.data[0].x"))
        ), "live appends must not duplicate points"
        assert page.console_errors == []
    finally:
        stop.set()
        trainer.join(timeout=10)
        run.finish()


def _insert_alert(dashboard: Any, run_id: str) -> int:
    with dashboard.app.state.session_factory() as session:
        alert = Alert(
            run_id=run_id,
            detector="entropy_collapse",
            severity="critical",
            status="open",
            secondary=False,
            acknowledged=False,
            first_step=180,
            last_step=260,
            message="Entropy fell to 22 % of its starting level in 80 steps.",
            evidence={"entropy": 0.27, "start": 1.2, "key": "actor/entropy"},
            advice=["Raise clip_ratio_high (Clip-Higher) to 0.28", "Add an entropy bonus"],
        )
        session.add(alert)
        session.commit()
        return alert.id


def test_run_page_shows_entropy_collapse_alert_on_panel_and_timeline(
    dashboard: Any, page: Any, artifacts_dir: Path
) -> None:
    run_id = new_run_id("alert")
    seed_run(dashboard.url, run_id)
    alert_id = _insert_alert(dashboard, run_id)
    page.goto(f"{dashboard.url}/runs/{run_id}")
    item = page.locator(".alert-item", has_text="entropy_collapse")
    item.wait_for(timeout=WAIT_MS)
    page.wait_for_function(
        f"(document.querySelector(`{graph_selector('entropy')}`)?.layout?.shapes?.length ?? 0) > 0",
        timeout=WAIT_MS,
        polling=POLL_MS,
    )
    assert alert_id in plot_state(page, "entropy")["customdata"]
    assert plot_state(page, "clip")["customdata"] == []
    item.click()
    page.get_by_text("Entropy fell to 22 %").wait_for(timeout=WAIT_MS)
    assert page.get_by_text("Raise clip_ratio_high (Clip-Higher) to 0.28").is_visible()
    page.screenshot(path=str(artifacts_dir / "run-page-alert.png"), full_page=True)
    assert page.console_errors == []


def test_run_page_shows_html_in_names_and_keys_as_text(dashboard: Any, page: Any) -> None:
    run_id = new_run_id("xss")
    hostile = "<img src=x onerror=alert(1)><b>bold</b>"
    seed_run(dashboard.url, run_id, steps=20, name=hostile, extra_keys={hostile: 1.0})
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f"{dashboard.url}/runs/{run_id}")
    page.locator(".run-title", has_text=hostile).wait_for(timeout=WAIT_MS)
    page.locator(".mini-title", has_text=hostile).wait_for(timeout=WAIT_MS)
    assert page.locator("b", has_text="bold").count() == 0
    assert dialogs == []
    assert page.console_errors == []


def test_run_page_patches_in_alert_raised_after_load_and_acts_on_it(
    dashboard: Any, page: Any
) -> None:
    run_id = new_run_id("late")
    seed_run(dashboard.url, run_id)
    page.goto(f"{dashboard.url}/runs/{run_id}")
    entropy = f"document.querySelector(`{graph_selector('entropy')}`)"
    page.wait_for_function(
        f"({entropy}?.data?.[0]?.x?.length ?? 0) > 0", timeout=WAIT_MS, polling=POLL_MS
    )
    assert plot_state(page, "entropy")["shapes"] == 2  # the start and 50 % guides
    alert_id = _insert_alert(dashboard, run_id)
    # the guides, the alert's line (on every chart) and its range on this one
    page.wait_for_function(
        f"{entropy}.layout.shapes.length === 4", timeout=WAIT_MS, polling=POLL_MS
    )
    state = plot_state(page, "entropy")
    assert state["customdata"] == [alert_id]
    assert state["lengths"] == [300, 1], "the patch adds the marker, the line is not resent"
    page.locator(".alert-item", has_text="entropy_collapse").click()
    page.get_by_role("button", name="acknowledge", exact=True).click()
    page.locator(".alert-item", has_text="open · ack").wait_for(timeout=WAIT_MS)
    page.get_by_role("button", name="resolve", exact=True).click()
    page.locator(".alert-item", has_text="resolved · ack").wait_for(timeout=WAIT_MS)
    assert page.get_by_role("button", name="resolve", exact=True).count() == 0
    assert page.console_errors == []


def test_run_page_draws_later_mini_charts_on_search_and_on_draw_all(
    dashboard: Any, page: Any
) -> None:
    run_id = new_run_id("minis")
    extra = {f"custom/metric_{i:02d}": float(i) for i in range(10)}
    seed_run(dashboard.url, run_id, steps=50, extra_keys=extra)
    page.goto(f"{dashboard.url}/runs/{run_id}")
    page.wait_for_selector(graph_selector("k7"), timeout=WAIT_MS)
    assert page.locator(".mini-grid .js-plotly-plot").count() == 8  # run_data.MINIS_FIRST
    assert page.locator(".mini-undrawn").count() == 2
    page.fill("#run-key-search", "metric_09")
    page.wait_for_selector(graph_selector("k9"), timeout=WAIT_MS)
    assert plot_state(page, "k9")["lengths"] == [50, 0]
    assert page.locator(".mini-undrawn").count() == 1  # metric_08 did not match
    page.fill("#run-key-search", "")
    page.click("#run-minis-all")
    page.wait_for_selector(graph_selector("k8"), timeout=WAIT_MS)
    assert page.locator(".mini-grid .js-plotly-plot").count() == 10
    assert page.console_errors == []
