"""A stand-in trainer for the fault tests: deterministic values, checkpoints, resumable.

    python trainer_script.py URL RUN_ID SPOOL_DIR STEPS STEP_SLEEP_S CHECKPOINT_FILE

Each step logs three values and two rollout samples. Every 25 steps it flushes rlguard (as a
trainer flushes its loggers when it checkpoints) and then writes the step to CHECKPOINT_FILE;
started again, it resumes after that step.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import rlguard

CHECKPOINT_EVERY = 25


def values_at(step: int) -> dict[str, float]:
    return {"loss": step * 0.5, "kl": math.sin(step), "nan": math.nan if step % 7 == 0 else 1.0}


def samples_at(step: int) -> list[dict[str, object]]:
    return [{"response": f"step {step} sample {i}", "reward": float(i)} for i in range(2)]


def main() -> int:
    url, run_id, spool_dir, steps, step_sleep_s, checkpoint = sys.argv[1:7]
    checkpoint_file = Path(checkpoint)
    done = int(checkpoint_file.read_text()) if checkpoint_file.exists() else None
    run = rlguard.init(
        project="faults",
        run_id=run_id,
        url=url,
        spool_dir=spool_dir,
        gpu=False,
        resume_from_step=done,
        flush_interval_s=0.1,
        backoff_base_s=0.1,
        backoff_cap_s=1.0,
        finish_timeout_s=120,
    )
    first = 0 if done is None else done + 1
    for step in range(first, int(steps)):
        run.log(values_at(step), step=step)
        run.log_samples(samples_at(step), step=step)
        time.sleep(float(step_sleep_s))  # the training step's own work
        if step % CHECKPOINT_EVERY == CHECKPOINT_EVERY - 1:
            run.flush()
            checkpoint_file.write_text(str(step))
    status = run.finish()
    sys.stdout.write(f"{status}\n")
    lost = status.dropped + status.samples_dropped
    return 0 if status.spool_batches == 0 and lost == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
