"""Capture the README's compare-with-bands screenshot from a real demo sweep.

Trains two demo presets on three seeds each (``rlguard demo``, the tiny GRPO loop on CPU) into a
throwaway SQLite service (``rlguard up``), then opens the compare page over the six runs grouped
by preset (mean ± 1 std across seeds, smoothed) in headless Chromium and saves its top as a PNG.

    .venv/bin/python -m scripts.compare_screenshot --out docs/images/compare-groups.png

About three minutes on two cores (--steps 60).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from benchmarks._support import POLL_MS
from benchmarks.dashboard import CHROMIUM, CHROMIUM_ARGS, rlguard_up

PROJECT = "compare-screenshot"
HEIGHT = 1500  # the controls, the delta table and the first two rows of panels
CLIP = {"x": 0, "y": 0, "width": 1280, "height": HEIGHT}
BANDS_DRAWN_JS = """(groups) => {
    const plots = [...document.querySelectorAll('.compare-grid .js-plotly-plot')];
    return plots.length > 0 && plots.every(p => p.data &&
        p.data.filter(t => t.meta && t.meta.role === 'mean' && t.x.length > 0).length >= groups);
}"""


def train(base: str, preset: str, seed: int, steps: int) -> None:
    """One demo run streamed into the service."""
    command = [sys.executable, "-m", "rlguard", "demo", "--preset", preset, "--seed", str(seed)]
    command += ["--steps", str(steps), "--url", base, "--project", PROJECT, "--device", "cpu"]
    subprocess.run(command, check=True, capture_output=True, timeout=900)


def capture(base: str, run_ids: list[str], out: Path, groups: int) -> None:
    """The compare page grouped by preset, its top cropped to a PNG at ``out``."""
    from playwright.sync_api import sync_playwright

    url = f"{base}/compare?runs={','.join(run_ids)}&group=config.preset&smooth=0.6"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": HEIGHT})
        page.goto(url)
        page.wait_for_function(BANDS_DRAWN_JS, arg=groups, timeout=120_000, polling=POLL_MS)
        page.screenshot(path=str(out), full_page=True, clip=CLIP)
        browser.close()


def main() -> None:
    """Train a small demo sweep into a throwaway service and capture the compare page."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/images/compare-groups.png"))
    parser.add_argument("--presets", nargs=2, default=["healthy", "runaway-kl"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, rlguard_up(f"sqlite:///{folder}/demo.db") as base:
        jobs = [(preset, seed) for preset in args.presets for seed in range(args.seeds)]
        with ThreadPoolExecutor(2) as pool:  # two trainers at a time on a two-core machine
            list(pool.map(lambda job: train(base, *job, args.steps), jobs))
        listed = httpx.get(f"{base}/api/v1/runs", params={"project": PROJECT, "limit": 100})
        runs = sorted(listed.json()["data"], key=lambda run: run["name"])  # healthy-seed0 first
        run_ids = [run["id"] for run in runs]
        capture(base, run_ids, args.out, len(args.presets))
    print(f"{args.out}: {len(run_ids)} runs, {args.out.stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main()
