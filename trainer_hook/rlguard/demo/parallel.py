"""Several presets at once, one process each (single-threaded), as separate runs."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor

from rlguard.demo.presets import PresetConfig, resolve
from rlguard.demo.trainer import LogFn, SamplesFn, TrainResult, train

# Builds the loggers inside the child process:
# (preset name, seed) -> (log, finish(status), log_samples)
LoggerFactory = Callable[[str, int], tuple[LogFn, Callable[[str], None], SamplesFn | None]]


def train_one(
    preset: str | PresetConfig,
    steps: int,
    seed: int,
    device: str,
    make_logger: LoggerFactory | None = None,
    threads: int = 1,
) -> TrainResult:
    """One run in this process with ``threads`` torch threads (0: torch's default).

    The logger is built here, in the process that trains, and finished when training ends.
    """
    import torch

    if threads:
        torch.set_num_threads(threads)
    if make_logger is None:
        return train(preset, steps, seed, device)
    log, finish, log_samples = make_logger(resolve(preset).name, seed)
    try:
        result = train(preset, steps, seed, device, log, log_samples)
    except BaseException:
        finish("failed")
        raise
    finish("finished")
    return result


def train_parallel(
    presets: Sequence[str | PresetConfig],
    steps: int,
    seed: int = 0,
    device: str = "cpu",
    make_logger: LoggerFactory | None = None,
    workers: int | None = None,
) -> dict[str, TrainResult]:
    """Train every preset in its own spawned process (``workers`` at a time; default all)."""
    names = [resolve(preset).name for preset in presets]
    jobs = [(preset, steps, seed) for preset in presets]
    results = train_jobs(jobs, device, make_logger, workers)
    return dict(zip(names, results, strict=True))


def train_jobs(
    jobs: Sequence[tuple[str | PresetConfig, int, int]],
    device: str = "cpu",
    make_logger: LoggerFactory | None = None,
    workers: int | None = None,
) -> list[TrainResult]:
    """Train each (preset, steps, seed) job in a spawned process, ``workers`` at a time; the
    results in the jobs' order."""
    context = multiprocessing.get_context("spawn")  # no fork of a process that holds torch threads
    with ProcessPoolExecutor(max_workers=workers or len(jobs), mp_context=context) as pool:
        futures = [
            pool.submit(train_one, preset, steps, seed, device, make_logger)
            for preset, steps, seed in jobs
        ]
        return [future.result() for future in futures]
