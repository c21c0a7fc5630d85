"""``benchmarks/wandb_tee.py`` runs end to end (its figures are read, never asserted on speed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_benchmark_wandb_tee_prints_the_tee_beside_wandbs_own_cost() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.wandb_tee", "--steps", "200", "--rounds", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["delivered_points"] == result["expected_points"] == 2 * 200 * 20
    for case in ("wandb_alone", "wandb_with_tee", "tee"):
        assert result[case]["median_us"] > 0
    assert result["tee_share_of_wandb"] > 0
