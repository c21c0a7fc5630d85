"""What the sender tells about a run's points and samples: counters, and warnings shown once."""

from __future__ import annotations

import dataclasses
import logging

from rlguard._spool import POINTS

logger = logging.getLogger("rlguard")


@dataclasses.dataclass
class Counters:
    """What happened to the logged points: the numbers behind ``run.status()``."""

    logged: int = 0
    skipped: int = 0
    sent: int = 0
    spooled: int = 0
    replayed: int = 0
    dropped: int = 0
    dropped_steps: int = 0
    dead_lettered: int = 0
    last_error: str | None = None
    samples_logged: int = 0  # kept by the per-step budget and put in batches
    samples_filtered: int = 0  # over the per-step budget, left out by the sampling policy
    samples_sent: int = 0
    samples_spooled: int = 0
    samples_replayed: int = 0
    samples_dropped: int = 0
    samples_dead_lettered: int = 0
    sample_signal_points: int = 0  # of logged: read from the samples (samples/... keys)

    def add(self, kind: str, name: str, n: int) -> None:
        """Count ``n`` points (kind ``"p"``) or samples (``"s"``) as ``name``."""
        field = name if kind == POINTS else f"samples_{name}"
        setattr(self, field, getattr(self, field) + n)


class Warnings:
    """Logs one warning per cause, so that a problem repeated every step is told once."""

    def __init__(self) -> None:
        self._causes: set[str] = set()

    def __repr__(self) -> str:
        return f"Warnings(causes={sorted(self._causes)})"

    def warn_once(self, cause: str, message: str) -> None:
        if cause not in self._causes:
            self._causes.add(cause)
            logger.warning(message)
