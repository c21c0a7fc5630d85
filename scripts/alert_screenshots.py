"""Capture one picture of a real alert per detector for the detector reference.

Trains each failure preset of the demo once (``rlguard demo``, the tiny GRPO loop on CPU, seed 0,
a few steps past its alert's window in tests/demo/test_demo_alerts.py) into a throwaway SQLite
service (``rlguard up``), opens each run page in headless Chromium, waits until the alert is drawn
and saves the panel it shades (or, for an alert no panel shades, the sidebar with the alert's
message, evidence and advice opened) as a PNG under docs/images/alerts/, one per detector.

    .venv/bin/python -m scripts.alert_screenshots

About ten minutes on two busy cores; ``--url`` captures from a service that holds the runs,
``--only clipfrac.png nonfinite.png`` trains and captures only those shots.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks._support import POLL_MS
from benchmarks.dashboard import CHROMIUM, CHROMIUM_ARGS, rlguard_up

PROJECT = "alert-screenshots"
SEED = 0
WIDTH, HEIGHT = 1280, 1600  # the viewport: panel cards about 900 px wide
PANEL_SCALE = 1.2  # a 900 px card comes out about 1080 px wide
DETAIL_SCALE = 1.8  # the 320 px alert detail about 580 px
PAD = 12  # around the alert detail, which has no margin of its own
STEPS = {
    "collapse": 50,
    "entropy-blowup": 60,
    "kl-too-strong": 130,
    "runaway-kl": 140,
    "kl-pinned": 70,
    "rollout-mismatch": 50,
    "clip-saturation": 50,
    "fp16-overflow": 50,
}
PANEL_GRAPH = "run-panel-graph"  # rlguard_frontend.ids.PANEL_GRAPH
ALERT_ITEM = "run-alert-item"  # rlguard_frontend.ids.ALERT_ITEM
CARD_OF_GRAPH = "xpath=ancestor::div[contains(@class, 'card')][1]"
# The panel's plot holds the alert's shading (a shape with a fill) and its marker trace, drawn.
ALERT_DRAWN_JS = """(id) => {
    const graph = document.getElementById(id);
    const plot = graph && graph.querySelector('.js-plotly-plot');
    if (!plot || !plot.data || !plot._fullLayout) return false;
    const lines = plot.data.some(t => !(t.meta && t.meta.role === 'alerts') && t.x && t.x.length);
    const marks = plot.data.some(t => t.meta && t.meta.role === 'alerts' && t.x && t.x.length);
    const shaded = (plot._fullLayout.shapes || []).some(s => s.fillcolor);
    return lines && marks && shaded && plot.querySelectorAll('.shapelayer path').length > 0
        && plot.querySelectorAll('.scatterlayer .point').length > 0;
}"""
DETAIL_SHOWN_JS = """(message) => {
    const shown = document.querySelector('.alert-detail .alert-message');
    return shown !== null && shown.textContent === message;
}"""


@dataclass(frozen=True)
class Shot:
    """One picture: the alert ``key`` of a preset's run, on ``panel`` (None: its detail)."""

    out: str
    preset: str
    key: str
    panel: str | None


SHOTS = (
    Shot("nonfinite.png", "fp16-overflow", "nonfinite", None),
    Shot("entropy_collapse.png", "collapse", "entropy_collapse", "entropy"),
    Shot("entropy_blowup.png", "entropy-blowup", "entropy_blowup", "entropy"),
    Shot("no_learning_signal.png", "collapse", "no_learning_signal", None),
    Shot("entropy_cov_leading.png", "runaway-kl", "entropy_cov_leading", "entropy"),
    Shot("kl_runaway.png", "runaway-kl", "kl_runaway", "kl"),
    Shot("kl_spike.png", "entropy-blowup", "kl_spike", "kl"),
    Shot("kl_penalty.png", "kl-too-strong", "kl_penalty_strong", "kl"),
    Shot("clipfrac.png", "clip-saturation", "clipfrac", "clip"),
    Shot("length.png", "entropy-blowup", "entropy_length_rise", "reward"),
    Shot("sample_quality.png", "entropy-blowup", "entropy_gibberish", None),
    Shot("kl_controller.png", "kl-pinned", "kl_controller", "kl_controller"),
    Shot("rollout_mismatch.png", "rollout-mismatch", "rollout_mismatch", None),
)


def train(base: str, preset: str) -> None:
    """One demo run streamed into the service."""
    command = [sys.executable, "-m", "rlguard", "demo", "--preset", preset, "--seed", str(SEED)]
    command += ["--steps", str(STEPS[preset]), "--url", base, "--project", PROJECT]
    subprocess.run([*command, "--device", "cpu"], check=True, capture_output=True, timeout=1800)


def first_alert(base: str, run_id: str, key: str) -> dict[str, Any]:
    """The run's earliest alert with this key; an error naming the keys raised if none."""
    alerts = httpx.get(f"{base}/api/v1/runs/{run_id}/alerts", params={"limit": 500}).json()
    found = sorted((a for a in alerts["data"] if a["key"] == key), key=lambda a: a["first_step"])
    if not found:
        raised = sorted({a["key"] for a in alerts["data"]})
        raise RuntimeError(f"run {run_id} raised no {key} alert (it raised: {raised})")
    return found[0]


def dash_id(kind: str, **fields: Any) -> str:
    """The DOM id Dash gives a pattern-matching component id (its keys sorted, compact JSON)."""
    return json.dumps({**fields, "type": kind}, sort_keys=True, separators=(",", ":"))


def capture(page: Any, base: str, run_id: str, shot: Shot, out: Path) -> dict[str, Any]:
    """One shot of a run page: the shaded panel's card, or the alert opened in the sidebar."""
    alert = first_alert(base, run_id, shot.key)
    page.goto(f"{base}/runs/{run_id}")
    if shot.panel is not None:
        graph = dash_id(PANEL_GRAPH, panel=shot.panel)
        page.wait_for_function(ALERT_DRAWN_JS, arg=graph, timeout=120_000, polling=POLL_MS)
        card = page.locator(f"[id='{graph}']").locator(CARD_OF_GRAPH)
        card.screenshot(path=str(out), animations="disabled")
    else:
        page.locator(f"[id='{dash_id(ALERT_ITEM, alert=alert['id'])}']").click(timeout=60_000)
        page.wait_for_function(
            DETAIL_SHOWN_JS, arg=alert["message"], timeout=60_000, polling=POLL_MS
        )
        box = page.locator(".alert-detail").bounding_box()
        assert box is not None, "the alert detail is not on the page"
        clip = {"x": box["x"] - PAD, "y": box["y"] - PAD}
        clip |= {"width": box["width"] + 2 * PAD, "height": box["height"] + PAD}
        page.screenshot(path=str(out), clip=clip, animations="disabled")
    return alert


def shoot(base: str, folder: Path, shots: tuple[Shot, ...] = SHOTS) -> None:
    """Each shot from the runs the service holds, one PNG each under ``folder``."""
    from playwright.sync_api import sync_playwright

    listed = httpx.get(f"{base}/api/v1/runs", params={"project": PROJECT, "limit": 100})
    runs = {run["name"]: run["id"] for run in listed.json()["data"]}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for shot in shots:
            scale = PANEL_SCALE if shot.panel else DETAIL_SCALE
            page = browser.new_page(
                viewport={"width": WIDTH, "height": HEIGHT}, device_scale_factor=scale
            )
            out = folder / shot.out
            alert = capture(page, base, runs[f"{shot.preset}-seed{SEED}"], shot, out)
            print(
                f"{out}: {shot.preset} seed {SEED} step {STEPS[shot.preset]}, {shot.key} "
                f"{alert['severity']} at steps {alert['first_step']}-{alert['last_step']}, "
                f"{out.stat().st_size // 1024} KiB"
            )
            page.close()
        browser.close()


def main() -> None:
    """Train the failure presets into a throwaway service and capture one alert per detector."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/images/alerts"))
    parser.add_argument("--url", help="a service that already holds the runs: capture only")
    parser.add_argument(
        "--only", nargs="+", metavar="PNG", help="capture only these shots (kl_controller.png ...)"
    )
    args = parser.parse_args()
    shots = tuple(shot for shot in SHOTS if not args.only or shot.out in args.only)
    if args.only and len(shots) != len(set(args.only)):
        parser.error(f"--only takes some of: {', '.join(shot.out for shot in SHOTS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.url:
        shoot(args.url, args.out, shots)
        return
    presets = {shot.preset for shot in shots}
    with tempfile.TemporaryDirectory() as folder, rlguard_up(f"sqlite:///{folder}/demo.db") as base:
        longest_first = sorted(presets, key=lambda preset: -STEPS[preset])
        with ThreadPoolExecutor(2) as pool:  # two trainers at a time on a two-core machine
            list(pool.map(lambda preset: train(base, preset), longest_first))
        shoot(base, args.out, shots)


if __name__ == "__main__":
    main()
