"""Streaming building blocks shared by the detectors: EMA, baselines, windows, streaks, trends.

Each primitive keeps only plain JSON values (floats, ints, lists) so a detector's state can be
dumped, sent through ``json`` and loaded in another process with bit-identical behaviour.
Non-finite values never enter any of them: callers filter with ``math.isfinite`` first.
"""

from __future__ import annotations

import copy
import math
from bisect import bisect_left, bisect_right, insort
from functools import lru_cache
from operator import mul
from typing import Any, NamedTuple


def is_finite(value: float | None) -> bool:
    """True for a real, finite number."""
    return value is not None and math.isfinite(value)


def median(values: list[float]) -> float:
    """Median of a non-empty list."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


class Persistent:
    """Base for primitives whose whole state is their instance attributes.

    Attributes named ``_*`` are caches derived from the rest: not dumped, rebuilt on load.
    """

    def dump(self) -> dict[str, Any]:
        # No copy here: DetectorSuite.dump_state passes everything through json_safe, which
        # rebuilds every dict and list (the state holds no other containers).
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    def load(self, state: dict[str, Any]) -> None:
        vars(self).update(copy.deepcopy(state))
        self._rebuild()

    def _rebuild(self) -> None:
        """Recompute the ``_*`` caches after load()."""


class Ema(Persistent):
    """EMA with a half-life in steps: alpha = 1 - 2^(-min(1, gap/half_life)) per logged point."""

    def __init__(self, half_life_steps: float) -> None:
        self.half_life_steps = half_life_steps
        self.value: float | None = None
        self.step: int | None = None

    def update(self, step: int, x: float) -> float:
        if self.value is None or self.step is None:
            self.value = x
        else:
            self.value += self.alpha(max(step - self.step, 1)) * (x - self.value)
        self.step = step
        return self.value

    def alpha(self, gap: int) -> float:
        """Weight of a point `gap` steps after the previous one (callers may cache gap 1)."""
        return 1.0 - 2.0 ** (-min(1.0, gap / self.half_life_steps))


class Baseline(Persistent):
    """Median of the first 5 finite points, or the first point alone if logging is sparse.

    Sparse logging (gap >= 10 steps) would mix the start with a state the run already left:
    one public trace lost 54 % of its entropy between its first two logged points.
    """

    POINTS = 5
    SPARSE_GAP_STEPS = 10

    def __init__(self) -> None:
        self.points: list[float] = []
        self.first_step: int | None = None
        self.value: float | None = None

    def update(self, step: int, x: float) -> float | None:
        if self.value is not None:
            return self.value
        if self.first_step is None:
            self.first_step = step
        elif len(self.points) == 1 and step - self.first_step >= self.SPARSE_GAP_STEPS:
            self.value = self.points[0]
            return self.value
        self.points.append(x)
        if len(self.points) >= self.POINTS:
            self.value = median(self.points)
            self.points = []
        return self.value


class Window(Persistent):
    """The last `size` finite points, steps and values in two parallel lists."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.steps: list[int] = []
        self.values: list[float] = []

    def push(self, step: int, x: float) -> None:
        self.steps.append(step)
        self.values.append(x)
        if len(self.values) > self.size:
            del self.steps[0], self.values[0]

    def __len__(self) -> int:
        return len(self.values)


class SquaresWindow(Window):
    """A Window that also keeps each value's square, for linear_trend's sum of squares."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self._squares: list[float] = []

    def push(self, step: int, x: float) -> None:
        self._squares.append(x * x)
        if len(self._squares) > self.size:
            del self._squares[0]
        super().push(step, x)

    def trend(self, last: int | None = None) -> Trend | None:
        """linear_trend over the last `last` points (all when None), bit for bit."""
        if last is None or last >= len(self.values):
            return linear_trend(self.steps, self.values, self._squares)
        return linear_trend(self.steps[-last:], self.values[-last:], self._squares[-last:])

    def _rebuild(self) -> None:
        self._squares = [x * x for x in self.values]


class SortedWindow(Window):
    """A Window that also keeps its values sorted, for an O(log n) median every step."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self._sorted: list[float] = []

    def push(self, step: int, x: float) -> None:
        ordered, values = self._sorted, self.values
        insort(ordered, x)
        self.steps.append(step)
        values.append(x)
        if len(values) > self.size:
            del ordered[bisect_left(ordered, values[0])], self.steps[0], values[0]

    def median(self) -> float:
        """median(self.values), bit for bit."""
        ordered = self._sorted
        middle = len(ordered) // 2
        if len(ordered) % 2:
            return ordered[middle]
        return (ordered[middle - 1] + ordered[middle]) / 2

    def _rebuild(self) -> None:
        self._sorted = sorted(self.values)


class Lookback(Persistent):
    """Step-indexed history to read a value `lag` steps ago (the latest point at or before it)."""

    def __init__(self, lag_steps: int) -> None:
        self.lag_steps = lag_steps
        self.steps: list[int] = []
        self.values: list[float] = []

    def push(self, step: int, x: float) -> None:
        self.steps.append(step)
        self.values.append(x)
        # Keep exactly one point at or before the oldest step anyone can ask for.
        while len(self.steps) > 1 and self.steps[1] <= step - self.lag_steps:
            del self.steps[0], self.values[0]

    def ago(self, step: int, lag: float) -> float | None:
        """Value at the latest point with point_step <= step - lag, or None if history is short."""
        index = bisect_right(self.steps, step - lag) - 1
        return self.values[index] if index >= 0 else None


class Streak(Persistent):
    """How many consecutive logged points a condition has held."""

    def __init__(self) -> None:
        self.count = 0

    def update(self, condition: bool) -> int:
        self.count = self.count + 1 if condition else 0
        return self.count


class Trend(NamedTuple):
    """OLS line through (step, value) points."""

    slope: float
    t_stat: float
    fitted_rise: float
    points: int


_new_trend = tuple.__new__


@lru_cache(maxsize=256)
def _consecutive_x(n: int) -> tuple[int, float]:
    """sum(x) and sum(x*x) - sum(x)**2 / n for x = 0 .. n-1, as linear_trend computes them."""
    sx, sxx = sum(range(n)), sum(x * x for x in range(n))
    return sx, sxx - sx * sx / n


def linear_trend(
    steps: list[int], ys: list[float], squares: list[float] | None = None
) -> Trend | None:
    """OLS slope, its t-statistic and the rise it predicts across the points (>= 5 points).

    ``squares``, when given, is ``[y * y for y in ys]`` computed beforehand (same values).
    """
    n = len(ys)
    if n < 5:
        return None
    origin, last = steps[0], steps[-1]  # shift x so the sums stay well conditioned
    xs: list[int] | range
    if last - origin == n - 1 and type(origin) is int and type(last) is int:
        # One point per step (steps only increase): x = 0, 1, ... n-1, whose sums are exact
        # ints that depend on n alone.
        xs = range(n)
        sx, x_spread = _consecutive_x(n)
    else:
        xs = [step - origin for step in steps]
        sx, sxx = sum(xs), sum(map(mul, xs, xs))
        x_spread = sxx - sx * sx / n
    sy, sxy = sum(ys), sum(map(mul, xs, ys))
    syy = sum(map(mul, ys, ys) if squares is None else squares)
    if x_spread <= 0:
        return None
    slope = (sxy - sx * sy / n) / x_spread
    residual = max(syy - sy * sy / n - slope * (sxy - sx * sy / n), 0.0)
    standard_error = math.sqrt(residual / (n - 2) / x_spread)
    if standard_error > 0:
        t_stat = slope / standard_error
    else:
        t_stat = math.copysign(math.inf, slope) if slope else 0.0
    return _new_trend(Trend, (slope, t_stat, slope * xs[-1], n))  # Trend(...), faster


def json_float(value: float) -> float | str:
    """A float as JSON allows it: non-finite values become "NaN", "Infinity", "-Infinity"."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def json_safe(value: Any) -> Any:
    """Recursively replace non-finite floats by their JSON strings."""
    if isinstance(value, float):
        return json_float(value)
    if isinstance(value, dict):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def rounded(value: float | None, digits: int = 4) -> float | None:
    """A number for messages and evidence: significant digits, None stays None."""
    if value is None or not math.isfinite(value):
        return value
    return float(f"{value:.{digits}g}")
