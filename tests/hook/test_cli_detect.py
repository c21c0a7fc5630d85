"""`rlguard detect`: a backtest of a stored run from the command line, against a real service."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import httpx

from tests.conftest import RunningServer, new_run_id
from tests.detectors.scenarios import SCENARIOS

COLLAPSE = next(s for s in SCENARIOS if s.name == "S2_early_collapse")


def _store_collapse(url: str) -> str:
    run_id = new_run_id("cli-detect")
    steps = [
        {"step": t, "values": {k: ("NaN" if math.isnan(v) else v) for k, v in values.items()}}
        for t, values in COLLAPSE.run(seed=3)
    ]
    with httpx.Client(base_url=url, timeout=30) as http:
        http.post("/api/v1/runs", json={"id": run_id, "project": "cli", "config": COLLAPSE.config})
        http.post(f"/api/v1/runs/{run_id}/batches", json={"batch_id": "all", "steps": steps})
    return run_id


def _detect(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlguard", "detect", *args, "--url", url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "RLGUARD_URL": url},
    )


def test_cli_detect_lists_backtest_alerts(server: RunningServer) -> None:
    run_id = _store_collapse(server.url)
    result = _detect(server.url, run_id)
    assert result.returncode == 0, result.stderr
    assert "entropy_collapse" in result.stdout + result.stderr
    loose = _detect(
        server.url,
        run_id,
        "--threshold",
        "entropy_collapse.spent_ratio=0.01",
        "--threshold",
        "entropy_collapse.collapse_ratio=0.001",
    )
    assert loose.returncode == 0
    assert "[critical] entropy_collapse" not in loose.stdout + loose.stderr


def test_cli_detect_bad_threshold_is_refused(server: RunningServer) -> None:
    result = _detect(server.url, "any-run", "--threshold", "kl_runaway.level_warn")
    assert result.returncode == 2
    assert "NAME=NUMBER" in result.stdout + result.stderr


def test_cli_detect_misspelt_threshold_names_the_valid_ones(server: RunningServer) -> None:
    run_id = _store_collapse(server.url)
    result = _detect(server.url, run_id, "--threshold", "kl_runaway.level_wrn=0.6")
    assert result.returncode == 1
    said = result.stdout + result.stderr
    assert "unknown threshold 'kl_runaway.level_wrn'; did you mean 'kl_runaway.level_warn'?" in said
    assert "kl_runaway's are floor, growth, lookback_steps, persistence, level_warn," in said
    assert "stability/thresholds.py" not in said and "DEFAULTS" not in said
