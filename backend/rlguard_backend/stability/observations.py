"""What every detector sees at a step: raw values, EMAs, baselines, the reward trend, warmup."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache, partial
from operator import add, itemgetter, mul, sub
from typing import Any, NamedTuple

import numpy as np

from rlguard_backend.stability.columns import Bools, Columns, Floats, Ints, everywhere
from rlguard_backend.stability.context import RunContext
from rlguard_backend.stability.events import Severity
from rlguard_backend.stability.primitives import (
    Baseline,
    RiseBound,
    Series,
    Trend,
    _consecutive_x,
    fit_line,
    is_finite,
    json_safe,
    linear_trend,
    rounded,
)
from rlguard_backend.stability.thresholds import Thresholds

# Canonical signals smoothed and baselined for the detectors; "kl_ref" is derived (see below).
_FAST_SIGNALS = {"entropy": "half_life_entropy", "clipfrac": "half_life_clipfrac"}
SMOOTHED_SIGNALS = (
    "entropy",
    "clipfrac",
    "reward_mean",
    "frac_zero_std",
    "kl_ref",
    "response_length",
    "response_clip_ratio",
)
REWARD_WINDOW_POINTS = 50


def reference_kl(values: Mapping[str, float], placement: str | None) -> tuple[float | None, str]:
    """Per-token KL to the reference and where it came from (placement decides if both exist)."""
    order = ("reward_kl_penalty", "kl_loss")
    if placement != "reward":
        order = ("kl_loss", "reward_kl_penalty")
    for name in order:
        if name in values:
            return values[name], name
    length = values.get("response_length")
    if "kl_ref_seq" in values and is_finite(length) and length:
        # Old TRL logs a per-sequence sum; thresholds are per token (DETECTORS.md §6).
        return values["kl_ref_seq"] / length, "kl_ref_seq / response_length"
    return None, ""


class RewardState:
    """Reward trend verdicts shared by D2, D3, D5, D8 (DETECTORS.md §2).

    Built once per reward point over the reward window's lists, which it reads but never
    changes; it is replaced before the window changes again. The trend (slope, t-statistic)
    is fitted when first asked for unless it was fitted already for ``improving``.
    """

    __slots__ = (
        "_long_known",
        "_long_trend",
        "_points",
        "_steps",
        "_trend",
        "_trend_known",
        "_values",
        "gain",
        "improving",
        "known",
        "note",
        "r_max",
        "r_min",
        "stagnant",
    )

    def __init__(
        self,
        known: bool,
        improving: bool = False,
        stagnant: bool = False,
        gain: float | None = None,  # R̄ - R0
        r_min: float = 0.0,
        r_max: float = 1.0,
        note: str | None = None,  # set when bounds are not the configured ones
        window: Series | None = None,
        points: int = 0,  # the trend's points, the last of the window
        trend: Trend | None = None,  # the trend, when fitted already
    ) -> None:
        self.known = known
        self.improving = improving
        self.stagnant = stagnant
        self.gain = gain
        self.r_min = r_min
        self.r_max = r_max
        self.note = note
        self._steps = [] if window is None else window.steps
        self._values = [] if window is None else window.values
        self._points = points
        self._trend = trend
        self._trend_known = trend is not None
        self._long_trend: Trend | None = None
        self._long_known = False

    @property
    def trend(self) -> Trend | None:
        """Trend over the last reward_trend_points points."""
        if not self._trend_known:
            points = self._points
            self._trend = linear_trend(self._steps[-points:], self._values[-points:])
            self._trend_known = True
        return self._trend

    @property
    def long_trend(self) -> Trend | None:
        """Trend over the whole reward window (E3: last 50 points); computed only when asked."""
        if not self._long_known:
            self._long_trend, self._long_known = linear_trend(self._steps, self._values), True
        return self._long_trend

    @property
    def range(self) -> float:
        return self.r_max - self.r_min

    def evidence(self) -> dict[str, Any]:
        facts: dict[str, Any] = {
            "reward_gain": rounded(self.gain),
            "reward_improving": self.improving,
            "reward_range": [rounded(self.r_min), rounded(self.r_max)],
        }
        if self.trend is not None:
            facts["reward_trend_t_stat"] = rounded(self.trend.t_stat, 3)
        if self.note:
            facts["reward_bounds"] = self.note
        return facts


_NO_REWARD = RewardState(known=False)
_NO_VALUES: dict[str, float] = {}


def _always(detector: str, key: str, severity: Severity) -> bool:
    return True


class StepView:
    """Read-only facts about one step, computed once and shared by all detectors.

    ``finite(name)`` is the canonical value when it is a finite number, else None: it is the
    bound ``get`` of a dict of the finite values, the hot path of every rule. One view per
    suite is refilled every step (detectors must not keep it past their evaluate()).
    """

    __slots__ = (
        "all_finite",
        "baselines",
        "emits",
        "finite",
        "kl_source",
        "kl_spike_jump",
        "length_ratio",
        "reward",
        "rho",
        "smoothed",
        "sources",
        "step",
        "steps_since_start",
        "values",
        "warm",
        "warmup_steps",
    )

    def __init__(
        self,
        warmup_steps: float,
        smoothed: dict[str, float | None],
        baselines: dict[str, float | None],
    ) -> None:
        self.warmup_steps = warmup_steps
        self.smoothed = smoothed  # canonical signal -> EMA (None before its first point)
        self.baselines = baselines  # canonical signal -> its start value (None until known)
        self.step = 0
        self.steps_since_start = 0
        self.warm = False  # past warmup W: only D1 and hard limits may fire before
        self.values: dict[str, float] = {}  # canonical signal -> raw value (finite or not)
        self.finite: Callable[[str], float | None] = _NO_VALUES.get
        self.all_finite = True
        self.sources: dict[str, str] = {}  # canonical signal -> raw key
        self.kl_source = ""
        self.reward = _NO_REWARD
        self.rho: float | None = None  # smoothed entropy over its start
        self.length_ratio: float | None = None  # smoothed response length over its start
        # D4 saw a critical per-update KL jump this step (D6 escalates on it).
        self.kl_spike_jump = False
        # emits(detector, key, severity): whether a firing verdict makes an event this step.
        # When it does not, the verdict would change nothing: the rule says nothing (None)
        # and builds no message or evidence.
        self.emits: Callable[[str, str, Severity], bool] = _always


class Observations:
    """Streaming EMAs, baselines and the reward window behind every StepView.

    EMA with a half-life in steps: alpha = 1 - 2^(-min(1, gap/half_life)) per logged point.
    """

    def __init__(self, context: RunContext, common: Thresholds) -> None:
        self.first_step: int | None = None
        self.baselines = {name: Baseline() for name in SMOOTHED_SIGNALS}
        self.rewards = Series(REWARD_WINDOW_POINTS)
        self.reward_low: float | None = None
        self.reward_high: float | None = None
        self._context = context
        self._common = common
        self._half_lives = {name: _half_life(name, common) for name in SMOOTHED_SIGNALS}
        self._alpha_one = {name: _alpha(half, 1) for name, half in self._half_lives.items()}
        # Each EMA's value is in view.smoothed; the step of its last point here, except while
        # `_together` is set: then the EMAs of `_group` last moved at that step (and their
        # `_ema_steps` are stale), which lets the usual step update them all in one pass.
        self._ema_steps: dict[str, int | None] = dict.fromkeys(SMOOTHED_SIGNALS)
        self._together: int | None = None
        self._group: _Group | None = None
        self._groups: dict[tuple[str, ...], _Group] = {}  # a run logs one or a few such sets
        self._kl_order = ("kl_loss", "reward_kl_penalty")
        if context.kl_placement == "reward":
            self._kl_order = ("reward_kl_penalty", "kl_loss")
        low, high = context.reward_min, context.reward_max
        self._bounds = (
            (low, high, None) if low is not None and high is not None and high > low else None
        )
        self._trend_points = int(common["reward_trend_points"])
        self._rise_bound = RiseBound(self._trend_points)  # a cache: rebuilt after load
        self._reward_stale = False  # view.reward lags the reward window (after advance())
        planned = context.planned_steps or 0.0
        warmup = max(common["warmup_steps"], common["warmup_fraction"] * planned)
        # Current EMA values and baselines, kept up to date in place (the view shares them).
        self.view = StepView(
            warmup, dict.fromkeys(SMOOTHED_SIGNALS), dict.fromkeys(SMOOTHED_SIGNALS)
        )

    def dump(self) -> dict[str, Any]:
        """The state, JSON-safe (an EMA of finite points can still overflow)."""
        steps = self._steps_of_emas()
        return {
            "first_step": self.first_step,
            "emas": {
                name: {"value": json_safe(value), "step": steps[name]}
                for name, value in self.view.smoothed.items()
            },
            "baselines": {name: base.dump() for name, base in self.baselines.items()},
            "rewards": self.rewards.dump(),
            "reward_low": json_safe(self.reward_low),
            "reward_high": json_safe(self.reward_high),
        }

    def load(self, state: dict[str, Any]) -> None:
        self.first_step = state["first_step"]
        view = self.view
        for name, ema in state["emas"].items():
            view.smoothed[name], self._ema_steps[name] = ema["value"], ema["step"]
        self._together, self._group = None, None
        for name, base_state in state["baselines"].items():
            self.baselines[name].load(base_state)
        view.baselines.update((name, base.value) for name, base in self.baselines.items())
        self.rewards.load(state["rewards"])
        self.reward_low, self.reward_high = state["reward_low"], state["reward_high"]
        view.reward, self._reward_stale = self._reward_state(), False

    def observe(
        self,
        step: int,
        values: dict[str, float],
        sources: dict[str, str],
        finite: dict[str, float] | None = None,
    ) -> StepView:
        """Fold one step's values in and return the shared view of it.

        ``finite`` holds the finite entries of ``values`` (computed when not given; it may be
        ``values`` itself). Both dicts are taken over: the derived "kl_ref" is added to them.
        """
        if self.first_step is None:
            self.first_step = step
        if finite is None:
            finite = {k: v for k, v in values.items() if v - v == 0.0}
        kl_ref, kl_source = self._reference_kl(values)
        if kl_ref is not None:
            values["kl_ref"] = kl_ref
            if kl_ref - kl_ref == 0.0:
                finite["kl_ref"] = kl_ref
            elif finite is values:
                finite = {k: v for k, v in values.items() if k != "kl_ref"}
        view = self.view
        smoothed = view.smoothed
        group = self._group
        if (
            self._together == step - 1
            and group is not None
            and finite.keys() >= group.present
            and finite.keys().isdisjoint(group.absent)
        ):
            # The usual step: the same smoothed signals as at the previous step, each with a
            # known baseline. _smooth's `current += alpha * (value - current)` for all, in C.
            current = group.take(smoothed)
            steps = map(mul, group.alphas, map(sub, group.take(finite), current))
            smoothed.update(zip(group.names, map(add, current, steps), strict=True))
            self._together = step
        else:
            self._smooth(step, finite, smoothed, view.baselines)
        reward = finite.get("reward_mean")
        if reward is not None:
            self._observe_reward(step, reward)
            view.reward = self._reward_state()
            self._reward_stale = False
        elif self._reward_stale:
            view.reward, self._reward_stale = self._reward_state(), False
        view.step = step
        view.steps_since_start = since = step - self.first_step
        view.warm = since >= view.warmup_steps
        view.values, view.sources, view.kl_source = values, sources, kl_source
        view.finite = finite.get
        view.all_finite = len(finite) == len(values)
        view.rho = _ratio(smoothed["entropy"], view.baselines["entropy"])
        view.length_ratio = _ratio(smoothed["response_length"], view.baselines["response_length"])
        view.kl_spike_jump = False
        return view

    def columns(self, steps: list[int], values: dict[str, Floats]) -> Columns | None:
        """The Columns of steps that follow the last one observed, every signal finite on each.

        None when they need the per-step path: before the first step, or while a logged
        smoothed signal has no baseline yet. Changes nothing: advance() does.
        """
        if self.first_step is None:
            return None
        kl_ref = self._reference_kl_column(values)
        if kl_ref is not None:
            values["kl_ref"] = kl_ref
        cols = Columns(steps, values)
        view, n, ema_steps = self.view, cols.n, self._steps_of_emas()
        moving: dict[str, list[float]] = {}
        for name in SMOOTHED_SIGNALS:
            current, column = view.smoothed[name], values.get(name)
            if column is None:
                cols.smoothed[name] = None if current is None else np.full(n, current)
                continue
            last = ema_steps[name]
            if current is None or last is None or view.baselines[name] is None:
                return None
            moving[name] = self._ema_column(name, current, last, steps, column)
        if moving:  # one array for all the moving EMAs, a row each
            cols.smoothed.update(zip(moving, np.array(list(moving.values())), strict=True))
        cols.baselines = view.baselines
        cols.since = cols.steps - self.first_step
        cols.warmup_steps = view.warmup_steps
        cols.warm = cols.since >= view.warmup_steps
        cols.rho = _ratio_column(cols.smoothed["entropy"], view.baselines["entropy"])
        cols.length_ratio = _ratio_column(
            cols.smoothed["response_length"], view.baselines["response_length"]
        )
        self._reward_columns(cols)
        return cols

    def advance(self, cols: Columns, begin: int, end: int) -> None:
        """Observe steps begin..end-1 of `cols` as observe() one at a time would (the steps
        before them observed already)."""
        view, last = self.view, cols.step_list[end - 1]
        ema_steps = self._steps_of_emas()
        moved = [name for name in SMOOTHED_SIGNALS if name in cols.values]
        for name in moved:
            column = cols.smoothed[name]
            assert column is not None
            view.smoothed[name], ema_steps[name] = float(column[end - 1]), last
        # Every moved signal has its baseline: the next step may take the one-pass update.
        self._group = self._group_of(tuple(moved)) if len(moved) > 1 else None
        self._together = last if len(moved) > 1 else None
        rewards = cols.value("reward_mean")
        if rewards is not None:
            low, high = self.reward_low, self.reward_high
            taken = rewards[begin:end]
            self.reward_low = float(taken.min()) if low is None else min(low, float(taken.min()))
            self.reward_high = float(taken.max()) if high is None else max(high, float(taken.max()))
            window = self.rewards
            window.steps.extend(cols.step_list[begin:end])
            window.values.extend(taken.tolist())
            del window.steps[:-REWARD_WINDOW_POINTS], window.values[:-REWARD_WINDOW_POINTS]
            self._rise_bound = RiseBound(self._trend_points)  # its sums: recomputed when next due
            self._reward_stale = True  # view.reward: rebuilt when next read

    def _ema_column(
        self, name: str, current: float, last: int, steps: list[int], values: Floats
    ) -> list[float]:
        """The EMA after each step: _smooth's `current += alpha * (value - current)`, in order."""
        alpha_one, half_life = self._alpha_one[name], self._half_lives[name]
        out: list[float] = []
        append = out.append
        if steps[0] == last + 1 and steps[-1] - steps[0] == len(steps) - 1:  # one step apart
            for value in values.tolist():
                current += alpha_one * (value - current)
                append(current)
            return out
        for step, value in zip(steps, values.tolist(), strict=True):
            gap = step - last
            alpha = alpha_one if gap == 1 else _alpha(half_life, gap)
            current += alpha * (value - current)
            append(current)
            last = step
        return out

    def _reference_kl_column(self, values: dict[str, Floats]) -> Floats | None:
        """_reference_kl for columns; kl_ref_seq only with a length at every step (else the
        batch is not column-wise: see the suite)."""
        for name in self._kl_order:
            if name in values:
                return values[name]
        if "kl_ref_seq" in values:
            length = values.get("response_length")
            if length is None:
                return None
            return values["kl_ref_seq"] / length  # not finite anywhere: no columns (suite)
        return None

    def _reward_columns(self, cols: Columns) -> None:
        """The reward trend's verdicts after each step (RewardState's improving, stagnant and
        bounds), exact: the rise bound only spares the fits it proves cannot pass."""
        rewards = cols.value("reward_mean")
        n = cols.n
        if rewards is None:  # the view's reward state stays as it is over these steps
            if self._reward_stale:
                self.view.reward, self._reward_stale = self._reward_state(), False
            reward = self.view.reward
            cols.reward_known = reward.known
            cols.improving = np.full(n, reward.improving)
            cols.stagnant = np.full(n, reward.stagnant)
            cols.r_min, cols.r_max = np.full(n, reward.r_min), np.full(n, reward.r_max)
            cols.plateau_of = partial(_steady_plateau, reward.long_trend, n)
            return
        common = self._common
        cols.reward_known = True
        first_low = rewards[0] if self.reward_low is None else self.reward_low
        first_high = rewards[0] if self.reward_high is None else self.reward_high
        if self._bounds is not None:
            cols.r_min, cols.r_max = np.full(n, self._bounds[0]), np.full(n, self._bounds[1])
        elif (
            min(first_low, float(rewards.min())) >= 0.0
            and max(first_high, float(rewards.max())) <= 1.0
        ):  # every reward seen so far in [0, 1] at each step: [0, 1] throughout
            cols.r_min, cols.r_max = np.zeros(n), np.ones(n)
        else:
            low = np.minimum.accumulate(np.concatenate(([first_low], rewards)))[1:]
            high = np.maximum.accumulate(np.concatenate(([first_high], rewards)))[1:]
            low = np.where(low == 0.0, 0.0, low)  # `reward_low or 0.0` turns -0.0 into 0.0
            high = np.where(high == 0.0, 0.0, high)
            unit = (low >= 0.0) & (high <= 1.0)
            spread = ~unit & (high > low)
            cols.r_min = np.where(spread, low, 0.0)
            cols.r_max = np.where(spread, high, 1.0)
        span = cols.r_max - cols.r_min
        limits = common["improving_rise"] * span
        steps = self.rewards.steps + cols.step_list
        values = self.rewards.values + rewards.tolist()
        points = min(self._trend_points, REWARD_WINDOW_POINTS)
        ends = np.arange(len(self.rewards) + 1, len(values) + 1)
        cols.plateau_of = partial(_plateau_verdicts, steps, values, ends)
        improving, settled = self._trend_verdicts(steps, values, ends, points, limits)
        for t in np.flatnonzero(~settled).tolist():  # too close to call in numpy: exactly
            end = int(ends[t])
            start = max(0, end - points)
            trend = self._improving_trend(steps[start:end], values[start:end], limits[t])
            improving[t] = trend is not None
        cols.improving = improving
        smoothed, start_value = cols.smoothed["reward_mean"], self.view.baselines["reward_mean"]
        if smoothed is None or start_value is None:
            cols.stagnant = np.zeros(n, dtype=np.bool_)
        else:
            gains = smoothed - start_value
            cols.stagnant = ~improving & (gains < common["stagnant_gain"] * span)

    def _trend_verdicts(
        self, steps: list[int], values: list[float], ends: Ints, points: int, limits: Floats
    ) -> tuple[Bools, Bools]:
        """For the trend ending at each of `ends`: improving or not, and whether that is
        settled. _improving_trend's formulas in numpy, whose sums round differently: a
        verdict is settled only when it holds with a margin far above any rounding (1e-9 of
        the terms, against ~1e-14); full windows of consecutive steps only."""
        n = len(ends)
        improving, settled = np.zeros(n, dtype=np.bool_), np.zeros(n, dtype=np.bool_)
        if points >= 5 and _all_flat(steps, values, ends, points, limits):
            settled[:] = True
            return improving, settled
        fits = _window_fits(steps, values, ends, points) if points >= 5 else None
        if fits is None:
            return improving, settled
        rows, slope = fits.rows, fits.slope
        rise = slope * (points - 1)
        rise_margin = 1e-9 * points * points * fits.size + 1e-300
        limit = limits[rows]
        flat = rise + rise_margin <= limit
        if everywhere(flat):  # the usual window: no fitted rise comes near the limit
            settled[rows] = True
            return improving, settled
        rising = rise - rise_margin > limit  # slope > 0 there: limits are never negative
        residual, residual_margin, spread = fits.residuals()
        with np.errstate(divide="ignore", invalid="ignore"):
            t_low = slope * (1 - 1e-9) / np.sqrt((residual + residual_margin) / spread)
            t_high = slope * (1 + 1e-9) / np.sqrt((residual - residual_margin) / spread)
        above = self._common["improving_t_stat"]
        separated = residual - residual_margin > 0
        yes = rising & separated & (t_low > above)
        no = flat | (rising & separated & (t_high <= above))
        improving[rows], settled[rows] = yes, yes | no
        return improving, settled

    def _reference_kl(self, values: dict[str, float]) -> tuple[float | None, str]:
        """reference_kl() with the placement's order worked out once."""
        for name in self._kl_order:
            if name in values:
                return values[name], name
        if "kl_ref_seq" in values:
            return reference_kl(values, self._context.kl_placement)
        return None, ""

    def _steps_of_emas(self) -> dict[str, int | None]:
        """The step of each EMA's last point (written out while `_together` stands for it)."""
        if self._together is not None and self._group is not None:
            self._ema_steps.update(dict.fromkeys(self._group.names, self._together))
        return self._ema_steps

    def _smooth(
        self,
        step: int,
        finite: dict[str, float],
        smoothed: dict[str, float | None],
        baseline_values: dict[str, float | None],
    ) -> None:
        """Update the EMAs and baselines of the smoothed signals present this step."""
        ema_steps, alpha_one = self._steps_of_emas(), self._alpha_one
        moved: list[str] = []
        for name in SMOOTHED_SIGNALS:
            value = finite.get(name)
            if value is None:
                continue
            moved.append(name)
            last, current = ema_steps[name], smoothed[name]
            if current is None or last is None:
                current = value
            else:
                gap = step - last
                alpha = alpha_one[name] if gap == 1 else _alpha(self._half_lives[name], gap)
                current += alpha * (value - current)
            smoothed[name], ema_steps[name] = current, step
            if baseline_values[name] is None:
                baseline_values[name] = self.baselines[name].update(step, value)
        # The fast path next step needs two or more signals (itemgetter of one is no tuple),
        # each with its baseline known (it updates none).
        known = len(moved) > 1 and all(baseline_values[name] is not None for name in moved)
        self._group = self._group_of(tuple(moved)) if known else None
        self._together = step if known else None

    def _group_of(self, names: tuple[str, ...]) -> _Group:
        group = self._groups.get(names)
        if group is None:
            alphas = tuple(self._alpha_one[name] for name in names)
            group = _Group(
                names, frozenset(names), _SMOOTHED - set(names), itemgetter(*names), alphas
            )
            self._groups[names] = group
        return group

    def _surely_below(self, limit: float) -> bool:
        """Whether the reward trend's fitted rise is certainly at most `limit`."""
        magnitude = max(abs(self.reward_low or 0.0), abs(self.reward_high or 0.0))
        bound = self._rise_bound.rise(magnitude)
        return bound is not None and bound <= limit

    def _observe_reward(self, step: int, reward: float) -> None:
        self.rewards.push(step, reward)
        self._rise_bound.push(self.rewards.steps, self.rewards.values)
        low, high = self.reward_low, self.reward_high
        self.reward_low = reward if low is None else min(low, reward)
        self.reward_high = reward if high is None else max(high, reward)

    def _reward_bounds(self) -> tuple[float, float, str | None]:
        if self._bounds is not None:
            return self._bounds
        low, high = self._context.reward_min, self._context.reward_max
        seen_low, seen_high = self.reward_low or 0.0, self.reward_high or 0.0
        if seen_low >= 0.0 and seen_high <= 1.0:
            return 0.0, 1.0, None if low is None and high is None else "assumed [0, 1]"
        if seen_high > seen_low:
            note = (
                f"rewards left [0, 1]; using the observed range [{seen_low:.4g}, {seen_high:.4g}]"
            )
            return seen_low, seen_high, note
        return 0.0, 1.0, "assumed [0, 1]"

    def _improving_trend(self, steps: list[int], values: list[float], limit: float) -> Trend | None:
        """The trend of these points when it shows improvement (a fitted rise above `limit`
        and a t-statistic above improving_t_stat), else None."""
        line = fit_line(steps, values)
        if line is None or line.fitted_rise <= limit:
            return None
        trend = line.trend()
        return trend if trend.t_stat > self._common["improving_t_stat"] else None

    def _reward_state(self) -> RewardState:
        """Depends only on the reward window, bounds and the reward EMA and baseline: all three
        change only when a finite reward arrives, so it is rebuilt only then."""
        rewards, common, points = self.rewards, self._common, self._trend_points
        if not rewards:
            return _NO_REWARD
        r_min, r_max, note = self._reward_bounds()
        span = r_max - r_min
        # Improving needs a fitted rise above `limit` and t > improving_t_stat. The exact fit
        # only when the rise bound allows it, and the t-statistic (one more pass over the
        # points) only once the rise test passes: on most steps, neither.
        limit = common["improving_rise"] * span
        trend, improving = None, False
        if not self._surely_below(limit):
            trend = self._improving_trend(rewards.steps[-points:], rewards.values[-points:], limit)
            improving = trend is not None
        smoothed, start = self.view.smoothed["reward_mean"], self.view.baselines["reward_mean"]
        gain = None if smoothed is None or start is None else smoothed - start
        stagnant = not improving and gain is not None and gain < common["stagnant_gain"] * span
        return RewardState(
            True, improving, stagnant, gain, r_min, r_max, note, rewards, points, trend
        )


class _WindowFits(NamedTuple):
    """linear_trend's sums, in numpy, over windows of consecutive steps (x = 0 .. points-1)."""

    rows: Ints  # which of the `ends` each window ends at
    windows: Floats  # a row of values per window
    size: Floats  # each window's largest absolute value
    sy: Floats
    centred_sxy: Floats
    slope: Floats
    x_spread: float

    def residuals(self) -> tuple[Floats, Floats, float]:
        """The residual sums of squares, the margin their rounding stays within, and
        (points - 2) * x_spread, for the t-statistics."""
        windows, points = self.windows, self.windows.shape[1]
        squares = (windows * windows).sum(axis=1)
        explained = self.slope * self.centred_sxy
        residual = squares - self.sy * self.sy / points - explained
        margin = 1e-9 * (squares + np.abs(explained)) + 1e-300
        return residual, margin, (points - 2) * self.x_spread


def _window_fits(
    steps: list[int], values: list[float], ends: Ints, points: int
) -> _WindowFits | None:
    """The sums of every full window of `points` one step apart that ends at one of `ends`
    (None when no window is full). Beyond ~1e150 a sum of squares overflows in one summation
    order and not in another: such windows are left out, to the exact fit."""
    rows = np.flatnonzero(ends >= points)
    if not rows.size:
        return None
    all_steps = np.array(steps, dtype=np.int64)
    rows = rows[all_steps[ends[rows] - 1] - all_steps[ends[rows] - points] == points - 1]
    windows = np.array(values)[(ends[rows] - points)[:, None] + np.arange(points)]
    size = np.abs(windows).max(axis=1)
    moderate = size < 1e150
    if not everywhere(moderate):
        rows, windows, size = rows[moderate], windows[moderate], size[moderate]
    _, sx, x_spread = _consecutive_x(points)
    sy = windows.sum(axis=1)
    centred_sxy = windows @ _xs_array(points) - sx * sy / points
    return _WindowFits(rows, windows, size, sy, centred_sxy, centred_sxy / x_spread, x_spread)


def _all_flat(
    steps: list[int], values: list[float], ends: Ints, points: int, limits: Floats
) -> bool:
    """Whether every trend of _trend_verdicts is settled as not improving, shown the short way
    for the usual batch: every window full, all of them inside one run of consecutive steps,
    and every fitted rise below its limit by a margin from the largest value (>= each
    window's own)."""
    begin = int(ends[0]) - points
    if begin < 0 or steps[-1] - steps[begin] != len(steps) - 1 - begin:
        return False
    ys = np.array(values[begin:])
    size = max(abs(float(ys.max())), abs(float(ys.min())))
    if not size < 1e150:  # sums of squares could overflow in one order only: the long way
        return False
    windows = ys[(ends - int(ends[0]))[:, None] + np.arange(points)]
    _, sx, x_spread = _consecutive_x(points)
    sy = windows.sum(axis=1)
    slope = (windows @ _xs_array(points) - sx * sy / points) / x_spread
    margin = 1e-9 * points * points * size + 1e-300
    return everywhere(slope * (points - 1) + margin <= limits)


@lru_cache(maxsize=16)
def _xs_array(points: int) -> Floats:
    """_consecutive_x's x values as a read-only array."""
    xs = np.array(_consecutive_x(points)[0])
    xs.flags.writeable = False
    return xs


def _steady_plateau(
    trend: Trend | None, n: int, min_points: int, t_limit: float
) -> tuple[Bools, Bools]:
    """Columns.plateau over steps that log no reward: the window's trend stays `trend`."""
    flat = trend is not None and trend.points >= min_points and trend.t_stat < t_limit
    return np.full(n, flat), np.ones(n, dtype=np.bool_)


def _plateau_verdicts(
    steps: list[int], values: list[float], ends: Ints, min_points: int, t_limit: float
) -> tuple[Bools, Bools]:
    """Columns.plateau over steps that log a reward: the reward window after each step is
    the points of (steps, values) before its `ends` entry, its last REWARD_WINDOW_POINTS.

    linear_trend's t-statistic in numpy, whose sums round differently: settled only where the
    verdict holds with margins far above any rounding (1e-9 of the terms, as _trend_verdicts),
    over full windows of consecutive steps. A window of fewer than min_points points (or 5)
    has no plateau; other windows are left unsettled."""
    n = len(ends)
    flat, settled = np.zeros(n, dtype=np.bool_), np.zeros(n, dtype=np.bool_)
    points = REWARD_WINDOW_POINTS
    settled[np.minimum(ends, points) < max(min_points, 5)] = True  # no trend, or too short
    fits = _window_fits(steps, values, ends, points) if min_points <= points else None
    if fits is None:
        return flat, settled
    rows, slope = fits.rows, fits.slope
    slope_margin = (1e-9 * points * points * fits.size + 1e-300) / (points - 1)
    residual, residual_margin, spread = fits.residuals()
    falling = slope + slope_margin <= 0.0  # t <= 0: flat
    rising = (slope - slope_margin > 0.0) & (residual - residual_margin > 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_low = (slope - slope_margin) / np.sqrt((residual + residual_margin) / spread)
        t_high = (slope + slope_margin) / np.sqrt((residual - residual_margin) / spread)
    below = rising & (t_high < t_limit)
    flat[rows] = falling | below
    settled[rows] = falling | below | (rising & (t_low >= t_limit))
    return flat, settled


_SMOOTHED = frozenset(SMOOTHED_SIGNALS)


class _Group(NamedTuple):
    """Smoothed signals that moved together at one step, and what the fast path needs."""

    names: tuple[str, ...]  # in SMOOTHED_SIGNALS order
    present: frozenset[str]
    absent: frozenset[str]  # the other smoothed signals
    take: Callable[[Mapping[str, Any]], tuple[Any, ...]]  # values of `names`, in order
    alphas: tuple[float, ...]  # each signal's alpha for a one-step gap


def _alpha(half_life_steps: float, gap: int) -> float:
    """Weight of a point `gap` steps after the previous one."""
    return 1.0 - 2.0 ** (-min(1.0, max(gap, 1) / half_life_steps))


def _ratio(current: float | None, start: float | None) -> float | None:
    """A smoothed value over its baseline (rho for entropy), None while either is unknown."""
    if current is None or not start:
        return None
    return current / start


def _ratio_column(current: Floats | None, start: float | None) -> Floats | None:
    """_ratio after each step (None when the start is unknown or zero, as _ratio says)."""
    if current is None or not start:
        return None
    return current / start


def _half_life(name: str, common: Thresholds) -> float:
    return common[_FAST_SIGNALS.get(name, "half_life_other")]
