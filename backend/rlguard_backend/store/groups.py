"""Runs grouped by config values, each group one mean line with its spread, on aligned steps.

How runs with different step grids are aligned (no value is made up outside a run's own steps):

1. each run's points of a signal are smoothed first, at full resolution, with the series
   endpoint's debiased EMA (``series.debiased_ema``);
2. the step range of all the runs together is cut into ``bins`` equal bins (at most one per
   step); a run's value in a bin is the mean of its smoothed points inside the bin, or, where it
   has none there, its smoothed line interpolated linearly at the bin's centre, but only while
   that centre lies within the run's first and last step;
3. a group's mean, sample standard deviation, min and max in a bin are over the runs with a
   value there, and ``n`` says how many there were (a run that stopped early leaves the group
   with fewer runs, and ``n`` shows it).

Pure numpy; the handler reads the points (``api/groups.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rlguard_backend.store.series import debiased_ema_array

SIGNIFICANT_DIGITS = 6


@dataclass(frozen=True)
class Points:
    """One run's finite points of one signal, in step order."""

    steps: np.ndarray  # int64
    values: np.ndarray  # float64

    @classmethod
    def of(cls, steps: np.ndarray, values: np.ndarray, smoothing: float = 0.0) -> Points:
        """From a key's steps and values (NaN kept), smoothed first when asked."""
        if smoothing > 0:
            values = debiased_ema_array(values, smoothing)
        finite = np.isfinite(values)
        return cls(steps[finite], values[finite])


@dataclass(frozen=True)
class Band:
    """A group's line: per bin centre, the mean and spread over its runs, and how many."""

    steps: list[float]
    mean: list[float | None]  # None only where a sum overflowed
    std: list[float | None]
    min: list[float | None]
    max: list[float | None]
    n: list[int]


def bin_edges(lo: int, hi: int, bins: int) -> np.ndarray:
    """``bins`` equal bins over steps ``lo..hi`` (fewer when there are fewer steps, none when
    ``hi`` is before ``lo``)."""
    count = max(0, min(bins, hi - lo + 1))
    return np.linspace(lo, hi + 1, count + 1)


def aligned(points: Points, edges: np.ndarray) -> np.ndarray:
    """A run's value in each bin (NaN where it has none): its mean there, else interpolated."""
    centres = (edges[:-1] + edges[1:]) / 2
    out = np.full(len(centres), np.nan)
    if len(points.steps) == 0:
        return out
    index = np.searchsorted(edges, points.steps, side="right") - 1
    inside = (index >= 0) & (index < len(centres))
    sums = np.bincount(index[inside], points.values[inside], minlength=len(centres))
    counts = np.bincount(index[inside], minlength=len(centres))
    has = counts > 0
    out[has] = sums[has] / counts[has]
    within = (centres >= points.steps[0]) & (centres <= points.steps[-1]) & ~has
    out[within] = np.interp(centres[within], points.steps, points.values)
    return out


def band(runs: Sequence[Points], edges: np.ndarray) -> Band:
    """Mean, sample std (0 for one run), min and max over the runs with a value in each bin."""
    matrix = np.vstack([aligned(p, edges) for p in runs]) if runs else np.empty((0, 0))
    centres = (edges[:-1] + edges[1:]) / 2
    present = ~np.isnan(matrix)
    n = present.sum(axis=0) if len(runs) else np.zeros(len(centres), dtype=int)
    keep = n > 0
    if not keep.any():
        return Band([], [], [], [], [], [])
    kept = matrix[:, keep]
    count = n[keep]
    mean = np.nansum(kept, axis=0) / count
    with np.errstate(over="ignore", invalid="ignore"):  # huge values: inf, sent as None
        spread = np.nansum((kept - mean) ** 2, axis=0)
    std = np.sqrt(np.where(count > 1, spread / np.maximum(count - 1, 1), 0.0))
    return Band(
        steps=[round(float(c), 1) for c in centres[keep]],
        mean=_wire(mean),
        std=_wire(std),
        min=_wire(np.nanmin(kept, axis=0)),
        max=_wire(np.nanmax(kept, axis=0)),
        n=[int(c) for c in count],
    )


def _wire(values: np.ndarray) -> list[float | None]:
    return [float(f"{v:.{SIGNIFICANT_DIGITS}g}") if math.isfinite(v) else None for v in values]
