"""A batch of steps column-wise, for the suite's fast path over the quiet steps of a batch.

Per step, the detectors cost tens of µs of Python: the usual step of a healthy run only moves
EMAs, windows and counters. DetectorSuite.feed_many instead builds one Columns for the leading
steps of a batch (one array per signal: raw values, EMAs, warmup, reward trend verdicts), asks
each detector how many of those steps it is certainly silent for (no rule fires, no open alert
clears), and advances every state over them at once; feed() takes the step where something
speaks, and the same columns serve the steps after it. Everything here reproduces the per-step
arithmetic bit for bit: element-wise IEEE operations, which numpy rounds as Python does, and
sequential loops wherever the per-step code accumulates (EMAs, sums). Reductions whose rounding
differs (sums over windows) only ever decide whether the exact per-step computation is needed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from rlguard_backend.stability.lifecycle import AlertBook
from rlguard_backend.stability.primitives import Lookback

Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]


class Columns:
    """The leading steps of a batch, each signal one array (every signal on every step).

    ``values`` are the finite raw canonical values (with the derived "kl_ref"); ``smoothed``
    the EMAs after each step; ``baselines`` are constant (the fast path starts only once every
    logged smoothed signal has its baseline). The reward trend's verdicts after each step:
    ``improving``, ``stagnant``, ``r_min``, ``r_max``; ``reward_known`` is constant.
    """

    def __init__(self, steps: list[int], values: dict[str, Floats]) -> None:
        self.n = len(steps)
        self.step_list = steps
        self.steps: Ints = np.array(steps, dtype=np.int64)
        self.values = values
        self.smoothed: dict[str, Floats | None] = {}
        self.baselines: dict[str, float | None] = {}
        self.since: Ints = self.steps
        self.warm: Bools = np.ones(self.n, dtype=np.bool_)
        self.warmup_steps = 0.0
        self.rho: Floats | None = None
        self.length_ratio: Floats | None = None
        self.reward_known = False
        self.improving: Bools = np.zeros(self.n, dtype=np.bool_)
        self.stagnant: Bools = np.zeros(self.n, dtype=np.bool_)
        self.r_min: Floats = np.zeros(self.n)
        self.r_max: Floats = np.ones(self.n)
        self.alerts = AlertBook(0)  # the suite's open alerts
        self.detectors: list[Any] = []  # the detectors with something to read here, in order
        self.names: tuple[str, ...] = ()  # the canonical signals logged
        # E3's reward plateau (RewardState.long_trend) after each step, (flat, settled) for
        # (min_points, t_limit): costly, so worked out over all the steps when first asked for
        # (Observations sets how), kept in `derived`, which every tail shares.
        self.plateau_of: Callable[[int, float], tuple[Bools, Bools]] | None = None
        self.derived: dict[tuple[int, float], tuple[Bools, Bools]] = {}
        self.offset = 0  # index of this view's first step in the columns `derived` covers

    def tail(self, start: int) -> Columns:
        """The same columns from step index `start` on."""
        out = copy.copy(self)
        out.n = self.n - start
        out.step_list, out.steps = self.step_list[start:], self.steps[start:]
        out.values = {name: column[start:] for name, column in self.values.items()}
        out.smoothed = {
            name: None if column is None else column[start:]
            for name, column in self.smoothed.items()
        }
        out.since, out.warm = self.since[start:], self.warm[start:]
        out.rho = None if self.rho is None else self.rho[start:]
        out.length_ratio = None if self.length_ratio is None else self.length_ratio[start:]
        out.improving, out.stagnant = self.improving[start:], self.stagnant[start:]
        out.r_min, out.r_max = self.r_min[start:], self.r_max[start:]
        out.offset = self.offset + start
        return out

    def plateau(self, min_points: int, t_limit: float) -> tuple[Bools, Bools]:
        """After each step: whether the reward window's trend has a t-statistic below
        `t_limit` over `min_points` points or more (E3's plateau), and whether that is settled
        here; the steps where it is not go through feed()."""
        key = (min_points, t_limit)
        found = self.derived.get(key)
        if found is None:
            assert self.plateau_of is not None
            found = self.derived[key] = self.plateau_of(min_points, t_limit)
        flat, settled = found
        return flat[self.offset :], settled[self.offset :]

    def value(self, name: str) -> Floats | None:
        """The signal's finite raw values, or None when the batch does not log it."""
        return self.values.get(name)


class Quiet(NamedTuple):
    """What a detector says about some columns: silent for their first `steps` steps, and
    `advance(begin, end)`, which moves its state over steps begin..end-1 of them as feed()
    would (end <= steps), once it is where feed() leaves it after step begin - 1.

    `again(offset)`, when given: once feed() has taken step `steps` (where a rule spoke) and
    the state is where that leaves it, how many leading steps it is silent for now, counting
    from offset = steps + 1 and reading the alert book as it is then; None when the columns
    cannot tell (quiet_prefix must look afresh). `advance` still applies past that step."""

    steps: int
    advance: Callable[[int, int], None]
    again: Callable[[int], int | None] | None = None


def _nothing(begin: int, end: int) -> None:
    """The advance of a detector with no state to move."""


def silent(steps: int) -> Quiet:
    """A detector that has nothing to do on these steps."""
    return Quiet(steps, _nothing)


NOT_QUIET = silent(0)  # a detector without a column-wise path: every step goes through feed()


def anywhere(mask: Bools) -> bool:
    """mask.any(), in a third of its time on a batch (no Python-level wrapper)."""
    return len(mask) > 0 and bool(mask[mask.argmax()])


def everywhere(mask: Bools) -> bool:
    """mask.all(), likewise."""
    return len(mask) == 0 or bool(mask[mask.argmin()])


def run_lengths(condition: Bools, before: int) -> Ints:
    """`streak = streak + 1 if condition else 0` after each step, from `streak = before`."""
    if not anywhere(condition):  # the usual rule of a quiet run: reset at every step
        return np.zeros(len(condition), dtype=np.int64)
    if everywhere(condition):  # the usual clear rule of a quiet run: one more at every step
        return np.arange(before + 1, before + len(condition) + 1, dtype=np.int64)
    index = np.arange(1, len(condition) + 1)
    last_false = np.maximum.accumulate(np.where(condition, 0, index))
    counts = index - last_false
    counts[last_false == 0] += before
    return counts


def first(mask: Bools) -> int:
    """Index of the first True, or len(mask) when there is none."""
    at = int(mask.argmax()) if len(mask) else 0
    return at if at < len(mask) and mask[at] else len(mask)


def counting(before: int, n: int) -> Ints:
    """A count that goes up by one each step from `before`: its value after each step."""
    return before + np.arange(1, n + 1)


def window_shares(window: Bools, marks: Bools, size: int) -> tuple[Floats, Ints]:
    """For a window of at most `size` values (its values' marks: `window`) to which each new
    value (its mark: `marks`) is appended in turn: the share of marked values and the window's
    length after each. Counts of whole numbers: exact, as the per-step sums are."""
    totals = np.concatenate(([0], np.cumsum(np.concatenate((window, marks)))))
    ends = len(window) + np.arange(1, len(marks) + 1)
    counts = np.minimum(ends, size)
    return (totals[ends] - totals[ends - counts]) / counts, counts


def ago(history: Lookback, steps: Ints, values: Floats, lag: float) -> tuple[Floats, Bools]:
    """history.ago(step, lag) at each step, after that step's point (steps, values) is pushed.

    Returns the values (NaN where there is none) and where there is one. The per-step pushes
    trim points that no lag up to the history's own can reach, so the untrimmed points give
    the same answers.
    """
    all_steps = np.concatenate((np.array(history.steps, dtype=np.int64), steps))
    all_values = np.concatenate((np.array(history.values, dtype=np.float64), values))
    found = np.searchsorted(all_steps, steps - lag, side="right") - 1
    known = found >= 0
    return np.where(known, all_values[np.maximum(found, 0)], np.nan), known


def push_points(history: Lookback, steps: list[int], values: Floats) -> None:
    """history.push(step, value) for each point, as one extend and one trim."""
    history.steps.extend(steps)
    history.values.extend(values.tolist())
    history.push(history.steps.pop(), history.values.pop())  # re-push the last: trims once


def integral(lag: float) -> bool:
    """Whether a lookback threshold is a whole number of steps (as Lookback trims by int)."""
    return lag == int(lag)
