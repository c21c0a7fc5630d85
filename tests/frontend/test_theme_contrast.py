"""Both themes keep the form controls readable: WCAG AA contrast on the runs, run and compare
pages, measured in real headless Chromium from the colours the browser computed."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.conftest import new_run_id
from tests.frontend.helpers import WAIT_MS, seed_run
from tests.support.browser import POLL_MS

AA_NORMAL_TEXT = 4.5
CONTROL_TEXT = ", ".join(
    (
        ".dash-dropdown-value",
        ".dash-dropdown-placeholder",
        ".dash-dropdown-value-count",
        ".dash-slider-mark",
        "label span",  # radio and check items
        "input:not([type=checkbox]):not([type=radio])",
    )
)
# Each control text element: its colour and the stack of backgrounds behind it, innermost first.
READ_COLOURS = """(selector) => [...document.querySelectorAll(selector)]
  .filter(el => el.offsetParent !== null && !el.closest("[role=slider]")
    && (el.value || el.textContent).trim())  // a slider's thumb carries its value unseen
  .map(el => {
    const layers = [];
    for (let node = el; node; node = node.parentElement) {
      layers.push(getComputedStyle(node).backgroundColor);
    }
    layers.push(getComputedStyle(document.documentElement).backgroundColor);
    return {text: (el.value || el.textContent).trim().slice(0, 40),
            colour: getComputedStyle(el).color, layers};
  })"""


def rgba(css: str) -> tuple[float, float, float, float]:
    parts = [float(x) for x in re.findall(r"[\d.]+", css)]
    return (parts[0], parts[1], parts[2], parts[3] if len(parts) > 3 else 1.0)


def over(top: tuple[float, ...], below: tuple[float, float, float]) -> tuple[float, float, float]:
    alpha = top[3]
    return tuple(alpha * t + (1 - alpha) * b for t, b in zip(top[:3], below, strict=True))  # type: ignore[return-value]


def luminance(rgb: tuple[float, float, float]) -> float:
    def channel(c: float) -> float:
        c /= 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = map(channel, rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(element: dict[str, Any]) -> float:
    background: tuple[float, float, float] = (255.0, 255.0, 255.0)
    for layer in reversed(element["layers"]):  # paint from the page up to the element
        background = over(rgba(layer), background)
    text = over(rgba(element["colour"]), background)
    light, dark = sorted((luminance(text), luminance(background)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_theme_controls_meet_wcag_aa_on_runs_run_and_compare(
    dashboard: Any, page: Any, theme: str
) -> None:
    first, second = new_run_id("contrast"), new_run_id("contrast")
    seed_run(dashboard.url, first, steps=40)
    seed_run(dashboard.url, second, steps=40, name="other")
    pages = {
        "runs": ("/", "#runs-table"),
        "run": (f"/runs/{first}", "#run-panels"),
        "compare": (f"/compare?runs={first},{second}", "#compare-grid"),
    }
    low: list[tuple[str, str, float]] = []
    for name, (path, ready) in pages.items():
        joiner = "&" if "?" in path else "?"
        page.goto(f"{dashboard.url}{path}{joiner}theme={theme}")
        page.wait_for_selector(ready, timeout=WAIT_MS)
        page.wait_for_function(  # ?theme= is applied by a callback after the first draw
            "(theme) => document.documentElement.dataset.theme === theme",
            arg=theme,
            timeout=WAIT_MS,
            polling=POLL_MS,
        )
        page.wait_for_function(  # the page's controls are drawn
            f"(selector) => ({READ_COLOURS})(selector).length >= 3",
            arg=CONTROL_TEXT,
            timeout=WAIT_MS,
        )
        found = page.evaluate(READ_COLOURS, CONTROL_TEXT)
        assert page.evaluate("document.documentElement.dataset.theme") == theme, name
        low += [
            (name, e["text"], round(contrast(e), 2)) for e in found if contrast(e) < AA_NORMAL_TEXT
        ]
    assert low == []
    assert page.console_errors == []
