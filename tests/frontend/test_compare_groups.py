"""The compare page's groups, baseline deltas, config diff and URL state in real Chromium."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from tests.conftest import new_run_id
from tests.frontend.helpers import WAIT_MS
from tests.support.browser import POLL_MS

HOSTILE = "<img src=x onerror=alert(1)>"
LRS = (1e-3, 3e-3)
SEEDS = (0, 1, 2)
ENTROPY_MEANS_JS = """() => {
    const card = [...document.querySelectorAll('.compare-grid .card')]
        .find(c => c.querySelector('h4')?.innerText === 'entropy');
    const plot = card?.querySelector('.js-plotly-plot');
    const means = (plot?.data || []).filter(t => t.meta && t.meta.role === 'mean')
        .map(t => ({name: t.name, y: t.y, n: t.customdata}));
    return means.length ? means : null;
}"""


def _seed_sweep(base_url: str, steps: int = 193) -> list[str]:
    """Six runs: lr ∈ LRS × seed ∈ SEEDS; entropy = 1000·lr + seed, reward rising by seed.

    Seed s logs every (1 + s) steps; all end on step 192, so every bin has all three seeds.
    """
    project = new_run_id("sweep")
    run_ids = []
    with httpx.Client(base_url=base_url, timeout=30) as http:
        for lr in LRS:
            for seed in SEEDS:
                run_id = new_run_id("seed")
                config = {"optim": {"lr": lr}, "seed": seed, "note": HOSTILE if seed else "plain"}
                if seed == 1:
                    config[HOSTILE] = "a hostile key"
                name = HOSTILE if seed == 2 and lr == LRS[1] else f"lr{lr:g}-s{seed}"
                body = {"id": run_id, "project": project, "name": name, "config": config}
                http.post("/api/v1/runs", json=body).raise_for_status()
                rows = [
                    {
                        "step": s,
                        "values": {
                            "actor/entropy": 1000 * lr + seed,
                            "critic/score/mean": (1 + seed) * (s + 1) / steps,
                        },
                    }
                    for s in range(0, steps, 1 + seed)  # each seed on its own step grid
                ]
                batch = {"batch_id": "b", "steps": rows}
                http.post(f"/api/v1/runs/{run_id}/batches", json=batch).raise_for_status()
                run_ids.append(run_id)
    return run_ids


def _entropy(page: Any) -> Any:
    return page.locator(".card", has=page.locator("h4", has_text="entropy")).locator(
        ".js-plotly-plot"
    )


def _group_means(page: Any) -> list[dict[str, Any]]:
    """The entropy panel's group means, once it has drawn them.

    Waiting and reading are one evaluation: a redraw replaces the plot, so a read after a
    separate wait can meet the new plot before its traces exist.
    """
    handle = page.wait_for_function(ENTROPY_MEANS_JS, timeout=WAIT_MS, polling=POLL_MS)
    means: list[dict[str, Any]] = handle.json_value()
    return means


def _redrawn(page: Any) -> Any:
    """Waits, as a context, for the compare page's charts to come back from a change."""
    return page.expect_response(
        lambda r: (
            "_dash-update-component" in r.url
            and "compare-grid.children" in (r.request.post_data or "")
        ),
        timeout=WAIT_MS,
    )


@pytest.fixture
def sweep(dashboard: Any) -> list[str]:
    return _seed_sweep(dashboard.url)


def test_compare_groups_draw_one_band_per_config_value_with_the_right_mean(
    dashboard: Any, page: Any, sweep: list[str], artifacts_dir: Path
) -> None:
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    runs = ",".join(sweep)
    page.goto(f"{dashboard.url}/compare?runs={runs}&group=config.optim.lr&band=minmax")
    means = _group_means(page)
    assert [m["name"] for m in means] == ["optim.lr=0.001 · 3 runs", "optim.lr=0.003 · 3 runs"]
    for mean, lr in zip(means, LRS, strict=True):
        assert mean["y"] == pytest.approx([1000 * lr + 1] * len(mean["y"]))
        assert set(mean["n"]) == {3}
    fills = _entropy(page).evaluate("el => el.data.filter(t => t.fill === 'tonexty').length")
    assert fills == 2  # one band per group
    config = page.locator(".config-table")
    assert config.get_by_text("optim.lr", exact=True).count() == 1
    assert config.get_by_text(HOSTILE, exact=True).count() >= 2  # hostile keys, values: text
    assert config.get_by_text("a hostile key", exact=True).count() == 2
    assert page.locator(".config-table").get_by_text("seed", exact=True).count() == 1
    assert page.locator(".delta-table").get_by_text("(baseline)").count() == 1
    page.screenshot(path=str(artifacts_dir / "compare-groups.png"), full_page=True)
    assert dialogs == [] and page.locator("img[src='x']").count() == 0
    assert page.console_errors == []


def test_compare_copied_url_restores_the_view_in_a_fresh_browser(
    dashboard: Any, page: Any, browser: Any, sweep: list[str]
) -> None:
    runs = ",".join(sweep)
    page.goto(f"{dashboard.url}/compare?runs={runs}&group=config.optim.lr&keys=entropy")
    first = _group_means(page)
    assert page.locator(".compare-grid .card h4").all_inner_texts() == ["entropy"]
    with _redrawn(page):
        page.get_by_text("min–max").click()
    page.wait_for_url("**band=minmax**", timeout=WAIT_MS)
    with _redrawn(page):
        page.locator("#compare-smoothing [role=slider]").press("End")  # smoothing 0.99
    page.wait_for_url("**smooth=0.99**", timeout=WAIT_MS)
    copied = page.url
    shown = _group_means(page)
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    fresh = context.new_page()
    errors: list[str] = []
    fresh.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    fresh.goto(copied)
    assert _group_means(fresh) == shown
    assert fresh.locator("#compare-band input[value='minmax']").is_checked()
    assert fresh.locator(".compare-grid .card h4").all_inner_texts() == ["entropy"]
    assert "optim.lr" in fresh.locator("#compare-group-by").inner_text()
    context.close()
    page.go_back()
    page.wait_for_function("!location.search.includes('smooth=')", timeout=WAIT_MS, polling=POLL_MS)
    assert page.locator("#compare-band input[value='minmax']").is_checked()
    page.go_back()
    page.wait_for_function("!location.search.includes('band=')", timeout=WAIT_MS, polling=POLL_MS)
    expect(page.locator("#compare-band input[value='std']")).to_be_checked(timeout=WAIT_MS)
    assert _group_means(page) == first
    assert errors == [] and page.console_errors == []


def test_compare_overlay_shows_deltas_against_the_baseline_and_names_as_text(
    dashboard: Any, page: Any, sweep: list[str], artifacts_dir: Path
) -> None:
    baseline = sweep[0]
    page.goto(f"{dashboard.url}/compare?runs={','.join(sweep)}&baseline={baseline}")
    entropy = _entropy(page)
    entropy.wait_for(timeout=WAIT_MS)
    lengths = entropy.evaluate("el => el.data.filter(t => t.meta.role === 'raw').length")
    assert lengths == 6
    assert page.locator(".legendtext", has_text=HOSTILE).count() >= 1
    table = page.locator(".delta-table")
    column = table.locator("th").all_inner_texts().index("reward_mean")
    rewards = table.locator(f"tbody tr td:nth-child({column + 1})").all_inner_texts()
    # the reward of seed s ends at 1 + s; the baseline (lr 1e-3, seed 0) at 1
    assert rewards == [
        "1",
        "2 (+100.0 %)",
        "3 (+200.0 %)",
        "1 (+0.0 %)",
        "2 (+100.0 %)",
        "3 (+200.0 %)",
    ]
    page.screenshot(path=str(artifacts_dir / "compare-overlay.png"), full_page=True)
    assert page.locator("img[src='x']").count() == 0
    assert page.console_errors == []


def test_compare_page_comes_drawn_with_the_first_layout(
    dashboard: Any, page: Any, sweep: list[str]
) -> None:
    asked: list[str] = []
    page.on(
        "request",
        lambda r: asked.append(r.post_data or "") if "_dash-update-component" in r.url else None,
    )
    url = f"{dashboard.url}/compare?runs={','.join(sweep)}&group=config.optim.lr"
    with page.expect_response(lambda r: "_dash-layout" in r.url) as layout:
        page.goto(url)
    assert '"role":"mean"' in layout.value.text().replace(" ", "")
    assert len(_group_means(page)) == 2
    redraws = [body for body in asked if "compare-grid.children" in body]
    assert redraws == [], "the compare callback redrew what the layout brought"
    assert page.console_errors == []
