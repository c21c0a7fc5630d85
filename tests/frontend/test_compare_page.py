"""The compare page in real headless Chromium."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conftest import new_run_id
from tests.frontend.helpers import WAIT_MS, seed_run


def test_compare_page_overlays_two_runs_named_in_legend(
    dashboard: Any, page: Any, artifacts_dir: Path
) -> None:
    first, second = new_run_id("cmp"), new_run_id("cmp")
    seed_run(dashboard.url, first, name="baseline-clip0.2", steps=200)
    seed_run(dashboard.url, second, name="clip-higher-0.28", steps=150)
    page.goto(f"{dashboard.url}/compare?runs={first},{second}")
    entropy = page.locator(".card", has=page.locator("h4", has_text="entropy"))
    entropy.locator(".legendtext", has_text="baseline-clip0.2").wait_for(timeout=WAIT_MS)
    assert entropy.locator(".legendtext", has_text="clip-higher-0.28").count() == 1
    lengths = entropy.locator(".js-plotly-plot").evaluate("el => el.data.map(t => t.x.length)")
    assert lengths == [200, 150]
    page.screenshot(path=str(artifacts_dir / "compare-page.png"), full_page=True)
    assert page.console_errors == []
