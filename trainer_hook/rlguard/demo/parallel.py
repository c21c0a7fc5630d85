"""Several presets at once, one process each (single-threaded), as separate runs."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

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
    context = multiprocessing.get_context("spawn")  # no fork of a process that holds torch threads
    jobs: dict[str, Any] = {}
    with ProcessPoolExecutor(max_workers=workers or len(presets), mp_context=context) as pool:
        for preset in presets:
            name = resolve(preset).name
            jobs[name] = pool.submit(train_one, preset, steps, seed, device, make_logger)
        return {name: job.result() for name, job in jobs.items()}
