"""The benchmarks still run and print their JSON (tiny sizes; no timing is asserted here, the
hook's memory bound is)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import hook_memory

ROOT = Path(__file__).resolve().parents[2]


def _run(module: str, *args: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("module", "args", "keys"),
    [
        (
            "benchmarks.ingest",
            # one timed batch of each shape (and 20 live ones) after the 5 warm-up batches
            ("--batches", "1", "--rounds", "1"),
            (
                "sqlite",
                "postgres",
                "sqlite_catchup",
                "postgres_catchup",
                "sqlite_live",
                "postgres_live",
            ),
        ),
        ("benchmarks.query", ("--points", "40000", "--repeats", "3"), ("sqlite", "postgres")),
    ],
)
def test_benchmark_prints_json_with_baselines(
    module: str, args: tuple[str, ...], keys: tuple
) -> None:
    result = _run(module, *args)
    for key in keys:
        figures = result[key]
        assert all(isinstance(v, (int, float, bool)) for v in figures.values())
        assert any("raw" in name for name in figures), figures
    if module == "benchmarks.query":
        assert result["sqlite"]["spike_kept"] is True
        assert result["sqlite"]["api_points_returned"] <= 2000


def test_load_benchmark_short_run_loses_nothing_past_fifty_simultaneous_starts() -> None:
    # 64 trainers start at the same second on each database; the benchmark exits 1 on a lost
    # or duplicated point, a trainer that did not finish or a service that stopped answering.
    topologies = ("sqlite", "postgres", "postgres_proxy")
    result = _run(
        "benchmarks.load",
        "--levels",
        "64",
        "--seconds",
        "2",
        "--topologies",
        ",".join(topologies),
    )
    for kind in topologies:
        levels = result[kind]["levels"]
        assert [level["trainers"] for level in levels] == [64]
        assert [level["stored"] for level in levels] == [64 * 20 * 100]  # 2 s at 10 steps/s
        assert all(level["lost"] == level["duplicated"] == 0 for level in levels)
        assert all(level["read_failures"] == 0 for level in levels)


def test_benchmark_samples_prints_hook_costs_and_ingest_rates() -> None:
    result = _run("benchmarks.samples", "--steps", "20", "--batches", "2", "--render-rounds", "1")
    view = result["view"]
    assert (view["samples_512"]["rows_drawn"], view["samples_8"]["rows_drawn"]) == (200, 8)
    assert view["samples_512"]["median_ms"] > 0 and view["samples_512_over_samples_8"] > 0
    hook = result["hook"]
    assert hook["samples_delivered"] == 20 * 64
    assert {"median_us", "p99_us"} <= hook["log"].keys() <= hook["log_samples"].keys()
    for database in ("sqlite", "postgres"):
        assert result[database]["batches"] == 2 and result[database]["samples_per_s"] > 0


def test_benchmark_hook_overhead_prints_log_costs_and_cpu_per_step() -> None:
    result = _run(
        "benchmarks.hook_overhead", "--steps", "300", "--cpu-steps", "2000", "--rounds", "1"
    )
    assert result["log"]["rlguard_floats"]["delivered_points"] == 300 * 20
    for loop in ("tight", "paced"):
        figures = result["cpu"][loop]
        assert {"unlogged_us_per_step", "hook_cpu_us_per_step", "floor_us_per_step"} <= set(figures)
        assert figures["hook_cpu_us_per_step"] > 0


def test_benchmark_dashboard_quick_prints_every_view_beside_its_baseline() -> None:
    result = _run("benchmarks.dashboard", "--quick")
    assert result["live_samples"] == 3 and result["first_render_keys_listed"] == 31
    assert result["compare"]["runs"] == 6 and result["compare"]["baseline_2_runs"]["samples_s"]
    assert result["groups"]["groups"] == 2 and result["groups"]["groups_api_bytes"] > 0
    assert result["groups"]["baseline_overlaid"]["first_render_s"] > 0
    assert result["table"]["runs"] == 120 and result["table"]["baseline_50_runs"]["runs"] == 50
    assert result["table"]["filter_s"] > 0


def test_load_comparison_takes_medians_per_level_and_divides_by_the_baseline() -> None:
    from benchmarks.load import compare

    def level(trainers: int, p50: float, rate: int) -> dict[str, Any]:
        ingest = {"median_ms": p50, "p99_ms": 2 * p50, "n": 1}
        read = {"median_ms": 1.0, "p99_ms": 1.0, "n": 1}
        return {
            "trainers": trainers,
            "points_per_s": rate,
            "ingest_ms": ingest,
            "read_ms": read,
            "service_peak_rss_mb": 100.0,
        }

    this = [level(8, 10.0, 800), level(8, 30.0, 600), level(8, 20.0, 700), level(64, 5.0, 50)]
    baseline = [level(8, 40.0, 350), level(64, 10.0, 100)]
    rows = compare(this, baseline)
    assert [row["trainers"] for row in rows] == [8, 64]
    assert rows[0]["ingest_p50_ms"] == {"this": 20.0, "baseline": 40.0, "ratio": 0.5}
    assert rows[0]["points_per_s"]["ratio"] == 2.0
    assert rows[1]["ingest_p99_ms"] == {"this": 10.0, "baseline": 20.0, "ratio": 0.5}


def test_tree_env_makes_a_child_import_the_other_trees_hook_and_service(tmp_path: Path) -> None:
    from benchmarks._support import tree_env

    for package, folder in (("rlguard", "trainer_hook"), ("rlguard_backend", "backend")):
        (tmp_path / folder / package).mkdir(parents=True)
        (tmp_path / folder / package / "__init__.py").write_text("TREE = 'baseline'\n")
    code = "import rlguard, rlguard_backend; print(rlguard.TREE, rlguard_backend.TREE)"
    env = {**os.environ, **tree_env(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["baseline", "baseline"], out.stderr
    assert tree_env(None) == {}


def test_benchmark_stop_latency_prints_both_paces_beside_the_round_trip() -> None:
    result = _run("benchmarks.stop_latency", "--trials", "1", "--fast-s", "0.2", "--slow-s", "1")
    assert set(result) == {"round_trip_floor", "fast", "slow"}
    for pace, goal in (("fast", 2.0), ("slow", 10.0)):
        assert result[pace]["goal_s"] == goal and result[pace]["n"] == 1
        assert result[pace]["median_s"] > 0


def test_benchmark_hook_memory_prints_each_budget_beside_the_unlogged_loop() -> None:
    result = _run("benchmarks.hook_memory", "--seconds", "1", "--budgets", "16")
    assert set(result) == {"unlogged", "logged_16mb"}
    logged = result["logged_16mb"]
    assert logged["max_queue_mb"] == 16 and logged["steps"] > 0
    assert logged["dropped_steps"] > 0 and logged["spool_batches"] > 0  # the service is down
    # The budget holds (a memory bound, not a time): peak RSS within the unlogged loop's, the
    # queue's budget and the fixed overhead, the queue full (steps dropped) when measured.
    over = logged["peak_rss_mb"] - result["unlogged"]["peak_rss_mb"] - logged["max_queue_mb"]
    assert logged["over_budget_mb"] == round(over, 1)
    assert over <= hook_memory.FIXED_OVERHEAD_MB and logged["goal_met"] is True, result
