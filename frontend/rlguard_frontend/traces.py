"""From wire series to plottable arrays: non-finite values, the x axis, EMA continuation."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from rlguard_backend.schemas import SeriesData

X_MODES = ("step", "wall", "relative")
X_TITLES = {"step": "step", "wall": "wall time (UTC)", "relative": "hours since start"}
HOUR_S = 3600.0


def decode(values: Sequence[Any] | None) -> list[float | None]:
    """Wire values to floats; NaN and ±Infinity become gaps (``None``) in the drawn line."""
    out: list[float | None] = []
    for value in values or ():
        number = float(value) if isinstance(value, int | float | str) else math.nan
        out.append(number if math.isfinite(number) else None)
    return out


def drawn(values: Sequence[Any] | None) -> list[float | None]:
    """``decode``, rounded to 6 significant digits: what a chart shows, in ~half the bytes."""
    return [None if v is None else float(f"{v:.6g}") for v in decode(values)]


def start_time(series: dict[str, SeriesData]) -> float | None:
    """The earliest wall time among the series: zero of the relative-time axis."""
    firsts = [s.times[0] for s in series.values() if s.times and s.times[0] is not None]
    return min(firsts) if firsts else None


def x_values(
    steps: Sequence[int], times: Sequence[float | None] | None, mode: str, t0: float | None
) -> list[Any]:
    """The x coordinate of each point for the chosen axis (steps, UTC datetimes, hours)."""
    if mode == "step" or not times:
        return list(steps)
    if mode == "wall":
        return [_iso(t) for t in times]
    origin = t0 if t0 is not None else next((t for t in times if t is not None), 0.0)
    return [None if t is None else (t - origin) / HOUR_S for t in times]


def _iso(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")


def step_to_x(
    step: float,
    steps: Sequence[int],
    times: Sequence[float | None] | None,
    mode: str,
    t0: float | None,
) -> Any:
    """Map a step (an alert's range) onto the x axis by interpolating the drawn points' times."""
    if mode == "step":
        return step
    pairs = [(s, t) for s, t in zip(steps, times or (), strict=False) if t is not None]
    if not pairs:
        return None
    t = _interpolate(step, pairs)
    return x_values([int(step)], [t], mode, t0)[0]


def _interpolate(step: float, pairs: list[tuple[int, float]]) -> float:
    if step <= pairs[0][0]:
        return pairs[0][1]
    for (s0, t0), (s1, t1) in itertools.pairwise(pairs):
        if s0 <= step <= s1:
            return t0 if s1 == s0 else t0 + (t1 - t0) * (step - s0) / (s1 - s0)
    return pairs[-1][1]


def continue_ema(
    last: float | None, values: Sequence[float | None], weight: float
) -> list[float | None]:
    """Extend a smoothed line by live points; the debiasing term is ~1 this far into a run."""
    out: list[float | None] = []
    for value in values:
        if value is not None:
            last = value if last is None else weight * last + (1 - weight) * value
        out.append(None if value is None else last)
    return out
