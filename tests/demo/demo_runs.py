"""Demo runs trained once per test session and read by every test file that needs them.

A run is fixed by its preset and seed (trained single-threaded, as ``train_jobs`` does), and no
step depends on the steps still to come; a run also validates at its last step. So the first n
steps of a longer run are the n-step run whenever step n is a validation step, and a run
trained once to 200 steps answers for 120 or 40.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from rlguard.demo import PRESETS, TrainResult
from rlguard.demo.parallel import train_jobs

# (preset, steps, seed), as train_jobs takes them
Job = tuple[str, int, int]


class DemoRuns:
    """The runs trained so far; each job is answered by a run trained once."""

    def __init__(self, workers: int = 2) -> None:
        self.workers = workers
        self.runs: list[TrainResult] = []

    def train(self, jobs: Sequence[Job]) -> list[TrainResult]:
        """Each job's history, in the jobs' order. The jobs no run so far answers train in one
        pool, longest first (no worker idles at the end while a long run started last)."""
        pending: list[Job] = []
        for job in sorted(set(jobs), key=lambda job: (-job[1], job)):
            trained = [_job_of(run) for run in self.runs]
            if not any(_answers(done, job) for done in [*trained, *pending]):
                pending.append(job)
        if pending:
            self.runs += train_jobs(pending, workers=self.workers)
        return [self._first_steps(*job) for job in jobs]

    def _first_steps(self, name: str, steps: int, seed: int) -> TrainResult:
        run = next(r for r in self.runs if _answers(_job_of(r), (name, steps, seed)))
        return replace(run, history=run.history[:steps])


def _answers(trained: Job, job: Job) -> bool:
    """Whether the first steps of the ``trained`` run are the ``job``'s run."""
    (name, length, seed), (wanted, steps, wanted_seed) = trained, job
    if (name, seed) != (wanted, wanted_seed) or length < steps:
        return False
    return length == steps or steps % PRESETS[name].val_every == 0  # else it validates there


def _job_of(run: TrainResult) -> Job:
    return run.preset, len(run.history), run.seed
