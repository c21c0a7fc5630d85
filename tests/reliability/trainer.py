"""A trainer process for the reliability tests: a detector scenario streamed through the hook.

    python trainer.py URL RUN_ID SPOOL_DIR SEED STEP_SLEEP_S PROGRESS_FILE RELEASE_FILE

It logs the early-collapse scenario of ``tests/detectors/scenarios.py`` (seeded) and two rollout
samples a step, writes ``{"steps": logged so far, "status": run.status()}`` to PROGRESS_FILE every
10 steps, and, once every step is logged, keeps writing it while it waits for RELEASE_FILE to
exist before ``finish()``: the test decides when the run ends, so its faults land while every
trainer is still running. It prints its final ``run.status()`` as JSON. Settings such as the
spool budget come from the RLGUARD_* environment, and two of the tests' own:

- ``RELIABILITY_STEPS=A:B`` logs only the scenario's steps A to B-1 (a restarted trainer), and
  ``RELIABILITY_SCENARIO=NAME`` another scenario's values (under the same run config);
- ``RELIABILITY_CLOCK_SKEW_S=S`` shifts this process's wall clock (``time.time``) by S seconds
  before the hook is imported, as a machine whose clock is off would.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

_SKEW_S = float(os.environ.get("RELIABILITY_CLOCK_SKEW_S", "0"))
if _SKEW_S:
    _system_time = time.time
    time.time = lambda: _system_time() + _SKEW_S

import rlguard  # noqa: E402  (after the clock is set, as on a machine whose clock is off)
from tests.detectors.scenarios import SCENARIOS  # noqa: E402

SCENARIOS_BY_NAME = {s.name: s for s in SCENARIOS}
SCENARIO = SCENARIOS_BY_NAME["S2_early_collapse"]
RELEASE_TIMEOUT_S = 300.0


def steps(
    seed: int, first: int = 0, last: int | None = None, scenario: str = SCENARIO.name
) -> list[tuple[int, dict[str, float]]]:
    """The values this trainer logs, step by step (what the tests expect to find stored)."""
    return SCENARIOS_BY_NAME[scenario].run(seed=seed)[first:last]


def samples_at(seed: int, step: int) -> list[dict[str, object]]:
    """The two rollout samples logged at ``step``; their text names the seed."""
    return [{"response": f"seed {seed} step {step} sample {i}", "reward": float(i)} for i in (0, 1)]


def report(path: Path, logged: int, run: rlguard.Run) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"steps": logged, "status": dataclasses.asdict(run.status())}))
    tmp.replace(path)


def main() -> int:
    url, run_id, spool_dir, seed, step_sleep_s, progress, release = sys.argv[1:8]
    run = rlguard.init(
        project="reliability",
        run_id=run_id,
        url=url,
        spool_dir=spool_dir,
        config=SCENARIO.config,
        gpu=False,
        flush_interval_s=0.1,
        backoff_base_s=0.1,
        backoff_cap_s=0.5,
        request_timeout_s=10,
        finish_timeout_s=120,
    )
    first, last = os.environ.get("RELIABILITY_STEPS", "0:").split(":")
    scenario = os.environ.get("RELIABILITY_SCENARIO", SCENARIO.name)
    logged = steps(int(seed), int(first), int(last) if last else None, scenario)
    for i, (step, values) in enumerate(logged):
        run.log(values, step=step)
        run.log_samples(samples_at(int(seed), step), step=step)
        time.sleep(float(step_sleep_s))  # the training step's own work
        if i % 10 == 9:
            report(Path(progress), i + 1, run)
    deadline = time.monotonic() + RELEASE_TIMEOUT_S
    while not Path(release).exists() and time.monotonic() < deadline:
        report(Path(progress), len(logged), run)
        time.sleep(0.05)  # waiting for the test to end the run
    status = run.finish()
    sys.stdout.write(json.dumps(dataclasses.asdict(status)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
