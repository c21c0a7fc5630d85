"""The run page in real headless Chromium: panels, live updates, alerts, hostile names."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import expect

import rlguard
from rlguard_backend.models import Alert
from tests.conftest import new_run_id
from tests.frontend.helpers import WAIT_MS, graph_selector, plot_state, seed_run
from tests.support.browser import POLL_MS

# What a CPU run of seed_run logs nothing for, besides the GPU panel (no β: no KL controller).
ABSENT_ON_CPU = [
    "KL controller",
    "Truncation & zero-std groups",
    "Gradient norm",
    "GPU memory & power",
    "Host",
]


def test_run_page_draws_registry_panels_without_console_errors(
    dashboard: Any, page: Any, artifacts_dir: Path
) -> None:
    run_id = new_run_id("panels")
    seed_run(dashboard.url, run_id, extra_keys={"custom/my_metric": 3.0})
    page.goto(f"{dashboard.url}/runs/{run_id}")
    for panel in ("kl", "clip", "entropy", "reward"):
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
    absent = page.locator(".panels-absent span").all_inner_texts()
    assert absent == [*ABSENT_ON_CPU[:3], "GPU", *ABSENT_ON_CPU[3:]]
    assert page.locator(".card").count() == 4  # kl, clip, entropy, reward: no empty cards
    assert page.locator(".key-name", has_text="custom/my_metric").is_visible()
    page.screenshot(path=str(artifacts_dir / "run-page.png"), full_page=True)
    page.click("#app-theme-toggle")
    page.wait_for_function(
        f"document.querySelector(`{graph_selector('clip')}`).layout.paper_bgcolor === '#161b22'",
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
    page.locator(".key-name", has_text=hostile).wait_for(timeout=WAIT_MS)
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


def _post(base_url: str, run_id: str, batch_id: str, step: int, values: dict[str, float]) -> None:
    batch = {"batch_id": batch_id, "steps": [{"step": step, "values": values}]}
    httpx.post(f"{base_url}/api/v1/runs/{run_id}/batches", json=batch).raise_for_status()


def test_run_page_lists_120_other_keys_in_one_list_that_a_search_narrows(
    dashboard: Any, page: Any, artifacts_dir: Path
) -> None:
    run_id = new_run_id("keys")
    extra = {f"custom/metric_{i:03d}": i + 0.5 for i in range(120)}
    seed_run(dashboard.url, run_id, steps=50, extra_keys=extra)
    page.goto(f"{dashboard.url}/runs/{run_id}")
    page.wait_for_selector(graph_selector("entropy"), timeout=WAIT_MS)
    assert page.locator(".key-row").count() == 120
    assert page.locator(".other-keys .card, .other-keys .js-plotly-plot").count() == 0
    assert page.inner_text("#run-key-count") == "120 keys"
    row = page.locator(".key-row", has_text="custom/metric_007")
    assert row.locator(".key-value").inner_text() == "7.5"  # the key's last value
    page.screenshot(path=str(artifacts_dir / "run-page-keys.png"), full_page=True)
    page.fill("#run-key-search", "metric_1")
    page.get_by_text("20 of 120 keys", exact=True).wait_for(timeout=WAIT_MS)
    shown = page.locator(".key-row:visible .key-name").all_inner_texts()
    assert shown == [f"custom/metric_{i}" for i in range(100, 120)]
    assert page.console_errors == []


def test_run_page_draws_a_picked_key_and_a_sparkline_only_when_asked(
    dashboard: Any, page: Any, artifacts_dir: Path
) -> None:
    run_id = new_run_id("pick")
    extra = {f"custom/metric_{i:02d}": float(i) for i in range(12)}
    seed_run(dashboard.url, run_id, steps=50, extra_keys=extra)
    page.goto(f"{dashboard.url}/runs/{run_id}")
    row = page.locator(".key-row", has_text="custom/metric_09")
    row.wait_for(timeout=WAIT_MS)
    assert page.locator(".key-spark img").count() == 0
    row.locator(".key-spark").click()
    row.locator(".key-spark img").wait_for(timeout=WAIT_MS)
    assert page.locator(".key-spark img").count() == 1  # only the row asked
    assert page.locator(".picked-charts .js-plotly-plot").count() == 0
    row.locator(".key-name").click()
    page.wait_for_url("**pick=custom%2Fmetric_09**", timeout=WAIT_MS)
    chart = graph_selector("k9")
    page.wait_for_function(
        f"document.querySelector(`{chart}`)?.data?.length > 0", timeout=WAIT_MS, polling=POLL_MS
    )
    state = plot_state(page, "k9")
    assert state["lengths"] == [50, 0] and state["names"][0] == "custom/metric_09"
    assert "picked" in (row.get_attribute("class") or "")
    page.screenshot(path=str(artifacts_dir / "run-page-picked.png"), full_page=True)
    row.locator(".key-spark").click()
    expect(row.locator(".key-spark")).to_have_text("∿", timeout=WAIT_MS)
    assert page.locator(".key-spark img").count() == 0
    page.locator(".key-row", has_text="custom/metric_03").locator(".key-name").click()
    page.wait_for_selector(graph_selector("k3"), timeout=WAIT_MS)
    row.locator(".key-name").click()  # a second click takes the chart away
    expect(page.locator(".picked-charts .js-plotly-plot")).to_have_count(1, timeout=WAIT_MS)
    page.wait_for_function(
        "!location.search.includes('metric_09')", timeout=WAIT_MS, polling=POLL_MS
    )
    assert "pick=custom%2Fmetric_03" in page.url and page.locator(chart).count() == 0
    assert page.console_errors == []


def test_run_page_key_list_and_picked_chart_follow_the_run_live(dashboard: Any, page: Any) -> None:
    run_id = new_run_id("keylive")
    seed_run(dashboard.url, run_id, steps=50, extra_keys={"custom/a": 1.0, "custom/b": 2.0})
    page.goto(f"{dashboard.url}/runs/{run_id}?pick=custom/b")
    chart = graph_selector("k1")
    page.wait_for_function(
        f"document.querySelector(`{chart}`)?.data?.[0]?.x?.length === 50",
        timeout=WAIT_MS,
        polling=POLL_MS,
    )
    _post(dashboard.url, run_id, "more", 50, {"custom/a": 42.0, "custom/b": 3.0})
    value = page.locator(".key-row", has_text="custom/a").locator(".key-value")
    expect(value).to_have_text("42", timeout=WAIT_MS)
    page.wait_for_function(
        f"document.querySelector(`{chart}`).data[0].x.length === 51",
        timeout=WAIT_MS,
        polling=POLL_MS,
    )
    _post(dashboard.url, run_id, "new", 51, {"custom/aa_new": 7.0})  # sorts between a and b
    new_row = page.locator(".key-row", has_text="custom/aa_new")
    expect(new_row.locator(".key-value")).to_have_text("7", timeout=WAIT_MS)
    assert page.locator(".key-row").count() == 3
    expect(page.locator("#run-key-count")).to_have_text("3 keys", timeout=WAIT_MS)
    picked = graph_selector("k2")  # custom/b moved one place down the list
    page.wait_for_function(
        f"document.querySelector(`{picked}`)?.data?.[0]?.x?.length === 51",
        timeout=WAIT_MS,
        polling=POLL_MS,
    )
    assert plot_state(page, "k2")["names"][0] == "custom/b"
    assert page.console_errors == []


def test_run_page_names_absent_panels_on_one_line_until_their_keys_arrive(
    dashboard: Any, page: Any
) -> None:
    run_id = new_run_id("cpu")
    seed_run(dashboard.url, run_id, steps=20)
    page.goto(f"{dashboard.url}/runs/{run_id}")
    page.wait_for_selector(graph_selector("entropy"), timeout=WAIT_MS)
    line = page.locator(".panels-absent")
    assert line.inner_text() == (
        "Not logged by this run: KL controller, Truncation & zero-std groups, Gradient norm, "
        "GPU, GPU memory & power, Host"
    )
    assert line.locator("span", has_text="Host").get_attribute("title") == "draws system metrics"
    _post(dashboard.url, run_id, "gpu", 20, {"system/gpu0/utilization": 87.0})
    page.wait_for_function(
        f"document.querySelector(`{graph_selector('gpu')}`)?.data?.[0]?.x?.length === 1",
        timeout=WAIT_MS,
        polling=POLL_MS,
    )
    assert line.locator("span").all_inner_texts() == ABSENT_ON_CPU
    assert page.locator(".key-row").count() == 0  # the GPU key went to its panel
    assert page.console_errors == []
