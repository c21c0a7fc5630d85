"""DETECTORS.md §4: for 200 seeds per scenario, must-fire alerts fire in their windows and
everything else stays below WARN (or, after a NaN, is marked secondary)."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

import pytest

from .scenarios import SCENARIOS, scenario_problems

# 200 seeds is the acceptance sweep of DETECTORS.md §4; RLGUARD_SCENARIO_SEEDS=20 for a quick run.
SEEDS = int(os.environ.get("RLGUARD_SCENARIO_SEEDS", "200"))
WORKERS = 2  # the CI machine has two cores; each worker runs half the seeds


@pytest.mark.parametrize("name", [scenario.name for scenario in SCENARIOS])
def test_suite_matches_scenario_table_for_200_seeds(name: str) -> None:
    halves = [range(first, SEEDS, WORKERS) for first in range(WORKERS)]
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(WORKERS, mp_context=context) as pool:
        found = [p for part in pool.map(scenario_problems, [name] * WORKERS, halves) for p in part]
    assert found == []
