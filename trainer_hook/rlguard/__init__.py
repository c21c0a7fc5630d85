"""rlguard: a live stability monitor for RL fine-tuning of language models.

    import rlguard
    run = rlguard.init(project="grpo-math", config={"clip_ratio_low": 0.2, "kl_coef": 0.001})
    for step in range(1000):
        ...
        rlguard.log({"actor/ppo_kl": kl, "actor/entropy": entropy}, step=step)
    rlguard.finish()

Importing rlguard uses the standard library only; torch, numpy and nvidia-ml-py are optional.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rlguard import _registry
from rlguard._api import Api
from rlguard._config import HookConfig, load_config
from rlguard._rank import global_rank
from rlguard._run import Run, RunStatus
from rlguard.errors import (
    ConfigError,
    RejectedError,
    RetryableError,
    RLGuardError,
    SpoolError,
    TransportError,
)

__version__ = "0.1.0"  # the one place: pyproject.toml and the service read it from here
__all__ = [
    "Api",
    "ConfigError",
    "HookConfig",
    "RLGuardError",
    "RejectedError",
    "RetryableError",
    "Run",
    "RunStatus",
    "SpoolError",
    "TransportError",
    "current_run",
    "finish",
    "init",
    "log",
    "log_samples",
]


def init(
    project: str | None = None,
    name: str | None = None,
    run_id: str | None = None,
    config: Mapping[str, Any] | None = None,
    tags: Sequence[str] | None = None,
    url: str | None = None,
    token: str | None = None,
    resume: str | bool | None = None,
    resume_from_step: int | None = None,
    spool_dir: str | None = None,
    gpu: bool | None = None,
    on_alert: Callable[[dict[str, Any]], object] | None = None,
    **settings: Any,
) -> Run:
    """Start monitoring a run and make it current; bad arguments raise ``ConfigError`` here.

    Every argument also comes from ``RLGUARD_<NAME>`` (e.g. ``RLGUARD_URL``); ``settings`` takes
    the tuning knobs of ``HookConfig`` (``flush_interval_s``, ``spool_budget_mb`` …).
    """
    cfg = load_config(
        project=project,
        name=name,
        run_id=run_id,
        config=config,
        tags=tags,
        url=url,
        token=token,
        resume=resume,
        resume_from_step=resume_from_step,
        spool_dir=spool_dir,
        gpu=gpu,
        on_alert=on_alert,
        **settings,
    )
    active = cfg.enabled and (not cfg.rank_zero_only or global_rank() == 0)
    run = Run(cfg, active)
    run.start()
    _registry.remember(run)
    return run


def current_run() -> Run | None:
    """The run ``init()`` last started in this context (or process), if any."""
    return _registry.current()


def log(
    metrics: Mapping[str, Any],
    step: int | None = None,
    samples: Sequence[Mapping[str, Any]] | None = None,
) -> None:
    """``log()`` on the current run; call ``init()`` first."""
    run = _registry.current()
    if run is None:
        raise RLGuardError("rlguard.log() before rlguard.init(): start a run first")
    run.log(metrics, step, samples)


def log_samples(
    samples: Sequence[Mapping[str, Any]], step: int | None = None, split: str = "train"
) -> None:
    """``log_samples()`` on the current run; call ``init()`` first."""
    run = _registry.current()
    if run is None:
        raise RLGuardError("rlguard.log_samples() before rlguard.init(): start a run first")
    run.log_samples(samples, step, split)


def finish(status: str = "finished", summary: Mapping[str, Any] | None = None) -> RunStatus | None:
    """``finish()`` the current run, if any."""
    run = _registry.current()
    return None if run is None else run.finish(status=status, summary=summary)
