"""A copied URL of the runs grid or a run page opens the same view; back/forward restore views."""

from __future__ import annotations

import json
from typing import Any

from playwright.sync_api import expect

from benchmarks._dashboard_views import seed_table
from tests.conftest import new_run_id
from tests.frontend.helpers import WAIT_MS, graph_selector, plot_state, seed_run
from tests.support.browser import POLL_MS

NAMES_JS = (
    "[...document.querySelectorAll(\".ag-center-cols-container .ag-row [col-id='name']\")]"
    ".sort((a, b) => a.closest('.ag-row').getAttribute('row-index')"
    " - b.closest('.ag-row').getAttribute('row-index')).map(c => c.innerText)"
)
NAME_FILTER = ".ag-floating-filter[aria-colindex='3'] input"


def _fresh(browser: Any) -> tuple[Any, Any, list[str]]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    return context, page, errors


def _names_are(page: Any, names: list[str]) -> None:
    wanted = json.dumps(names, separators=(",", ":"))
    page.wait_for_function(
        f"JSON.stringify({NAMES_JS}) === '{wanted}'", timeout=WAIT_MS, polling=POLL_MS
    )


def test_runs_grid_copied_url_restores_sort_filter_and_columns(
    dashboard: Any, page: Any, browser: Any, sqlite_url: str
) -> None:
    config_of = lambda i: {"lr": (i + 1) * 1e-6}  # noqa: E731
    seed_table(sqlite_url, 30, new_run_id("grid"), config_of=config_of, name="run-{i:04d}")
    page.goto(dashboard.url + "/")
    page.get_by_text("30 runs", exact=True).wait_for(timeout=WAIT_MS)
    header = page.locator(".ag-header-cell[col-id='hparam.lr'] .ag-header-cell-label")
    header.click()
    header.click()  # descending
    page.wait_for_url("**sort=-hparam.lr**", timeout=WAIT_MS)
    page.locator(NAME_FILTER).fill("run-001")
    page.wait_for_url("**filter=**", timeout=WAIT_MS)
    expected = [f"run-{i:04d}" for i in range(19, 9, -1)]
    _names_are(page, expected)
    page.locator("#runs-status").click()
    page.locator(".dash-dropdown-option", has_text="finished").click()
    page.wait_for_url("**status=finished**", timeout=WAIT_MS)
    copied = page.url
    context, fresh, errors = _fresh(browser)
    fresh.goto(copied)
    _names_are(fresh, expected)
    expect(fresh.locator(NAME_FILTER)).to_have_value("run-001", timeout=WAIT_MS)
    assert fresh.get_by_text("10 of 30 runs match", exact=True).is_visible()
    assert "finished" in fresh.locator("#runs-status").inner_text()
    assert fresh.url == copied  # opening the view added no history entry of its own
    context.close()
    page.go_back()
    page.wait_for_function("!location.search.includes('status=')", timeout=WAIT_MS, polling=POLL_MS)
    _names_are(page, expected)
    expect(page.locator("#runs-status")).not_to_contain_text("finished", timeout=WAIT_MS)
    page.go_back()
    page.wait_for_function("!location.search.includes('filter=')", timeout=WAIT_MS, polling=POLL_MS)
    expect(page.locator(NAME_FILTER)).to_have_value("", timeout=WAIT_MS)
    page.get_by_text("30 runs", exact=True).wait_for(timeout=WAIT_MS)
    assert errors == [] and page.console_errors == []


def _zoom(page: Any, lo: int, hi: int) -> None:
    page.eval_on_selector(
        graph_selector("entropy"),
        f"el => Plotly.relayout(el, {{'xaxis.range[0]': {lo}, 'xaxis.range[1]': {hi}}})",
    )


def test_run_page_copied_url_restores_smoothing_zoom_and_keys(
    dashboard: Any, page: Any, browser: Any
) -> None:
    run_id = new_run_id("url")
    seed_run(dashboard.url, run_id, extra_keys={f"extra/k{i}": float(i) for i in range(3)})
    page.goto(f"{dashboard.url}/runs/{run_id}")
    page.wait_for_selector(graph_selector("entropy"), timeout=WAIT_MS)
    first = plot_state(page, "entropy")
    page.locator("#run-smoothing [role=slider]").press("End")  # smoothing 0.99
    page.wait_for_url("**smooth=0.99**", timeout=WAIT_MS)
    _zoom(page, 50, 150)
    page.wait_for_url("**from=50&to=150**", timeout=WAIT_MS)
    page.get_by_text("steps 50–150", exact=True).wait_for(timeout=WAIT_MS)
    page.locator("#run-key-search").fill("k1")
    page.locator("#run-key-search").press("Enter")
    page.wait_for_url("**keys=k1**", timeout=WAIT_MS)
    page.locator(".key-name", has_text="extra/k1").click()
    page.wait_for_url("**pick=extra%2Fk1**", timeout=WAIT_MS)
    copied = page.url
    context, fresh, errors = _fresh(browser)
    fresh.goto(copied)
    fresh.wait_for_selector(graph_selector("entropy"), timeout=WAIT_MS)
    assert fresh.get_by_text("steps 50–150", exact=True).is_visible()
    slider = "#run-smoothing [role=slider]"
    assert fresh.locator(slider).get_attribute("aria-valuenow") == "0.99"
    assert fresh.locator("#run-key-search").input_value() == "k1"
    assert fresh.locator(".key-row:visible .key-name").all_inner_texts() == ["extra/k1"]
    picked = fresh.locator(".picked-charts .mini")
    assert picked.locator(".mini-title").all_inner_texts() == ["extra/k1"]
    expect(picked.locator(".js-plotly-plot")).to_have_count(1, timeout=WAIT_MS)
    assert plot_state(fresh, "entropy")["lengths"] == plot_state(page, "entropy")["lengths"]
    assert fresh.url == copied
    context.close()
    page.go_back()
    page.wait_for_function("!location.search.includes('pick=')", timeout=WAIT_MS, polling=POLL_MS)
    page.go_back()
    page.wait_for_function("!location.search.includes('keys=')", timeout=WAIT_MS, polling=POLL_MS)
    page.go_back()
    page.wait_for_function("!location.search.includes('from=')", timeout=WAIT_MS, polling=POLL_MS)
    page.get_by_text("all steps", exact=True).wait_for(timeout=WAIT_MS)
    page.go_back()
    page.wait_for_function("!location.search.includes('smooth=')", timeout=WAIT_MS, polling=POLL_MS)
    lengths = "el.data.map(t => (t.x || []).length)"
    page.wait_for_function(
        f"JSON.stringify((el => {lengths})(document.querySelector(`{graph_selector('entropy')}`)))"
        f" === '{first['lengths']}'.replaceAll(' ', '')",
        timeout=WAIT_MS,
        polling=POLL_MS,
    )
    assert page.locator("#run-smoothing [role=slider]").get_attribute("aria-valuenow") == "0"
    assert errors == [] and page.console_errors == []
