"""What every detector sees at a step: raw values, EMAs, baselines, the reward trend, warmup."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rlguard_backend.stability.context import RunContext
from rlguard_backend.stability.events import Severity
from rlguard_backend.stability.primitives import (
    Baseline,
    Ema,
    SquaresWindow,
    Trend,
    is_finite,
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
    """Reward trend verdicts shared by D2, D3, D5, D8 (DETECTORS.md §2)."""

    __slots__ = (
        "_long_known",
        "_long_trend",
        "gain",
        "improving",
        "known",
        "note",
        "r_max",
        "r_min",
        "stagnant",
        "trend",
        "window",
    )

    def __init__(
        self,
        known: bool,
        improving: bool = False,
        stagnant: bool = False,
        gain: float | None = None,  # R̄ - R0
        r_min: float = 0.0,
        r_max: float = 1.0,
        trend: Trend | None = None,
        note: str | None = None,  # set when bounds are not the configured ones
        window: SquaresWindow | None = None,
    ) -> None:
        self.known = known
        self.improving = improving
        self.stagnant = stagnant
        self.gain = gain
        self.r_min = r_min
        self.r_max = r_max
        self.trend = trend
        self.note = note
        self.window = window
        self._long_trend: Trend | None = None
        self._long_known = False

    @property
    def long_trend(self) -> Trend | None:
        """Trend over the whole reward window (E3: last 50 points); computed only when asked."""
        if self.window is None:
            return None
        if not self._long_known:  # the state lasts until the next reward point
            self._long_trend, self._long_known = self.window.trend(), True
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


def _always(detector: str, key: str, severity: Severity) -> bool:
    return True


class StepView:
    """Read-only facts about one step, computed once and shared by all detectors.

    ``finite(name)`` is the canonical value when it is a finite number, else None: it is the
    bound ``get`` of a dict of the finite values, the hot path of every rule.
    """

    __slots__ = (
        "all_finite",
        "baselines",
        "emits",
        "findings",
        "finite",
        "kl_source",
        "reward",
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
        step: int,
        steps_since_start: int,
        warmup_steps: float,
        values: dict[str, float],  # canonical signal -> raw value (finite or not)
        smoothed: dict[str, float | None],
        baselines: dict[str, float | None],
        reward: RewardState,
        kl_source: str = "",
        sources: dict[str, str] | None = None,  # canonical signal -> raw key
        finite_values: dict[str, float] | None = None,  # the finite entries of `values`
    ) -> None:
        self.step = step
        self.steps_since_start = steps_since_start
        self.warmup_steps = warmup_steps
        # Past warmup W: only D1 and hard limits may fire before.
        self.warm = steps_since_start >= warmup_steps
        self.values = values
        self.smoothed = smoothed
        self.baselines = baselines
        self.reward = reward
        self.kl_source = kl_source
        self.sources = {} if sources is None else sources
        if finite_values is None:
            # x - x is 0.0 only for finite x (NaN and ±inf give NaN).
            finite_values = {k: v for k, v in values.items() if v - v == 0.0}
        self.finite: Callable[[str], float | None] = finite_values.get
        self.all_finite = len(finite_values) == len(values)
        # Facts one detector hands to a later one within the same step (D4's spike -> D6).
        self.findings: dict[str, Any] = {}
        # emits(detector, key, severity): whether a firing verdict makes an event this step.
        # Detectors skip building messages and evidence nobody will read when it is False.
        self.emits: Callable[[str, str, Severity], bool] = _always

    def ratio_to_start(self, name: str) -> float | None:
        """Smoothed value over its baseline (rho for entropy)."""
        current, start = self.smoothed.get(name), self.baselines.get(name)
        if current is None or not start:
            return None
        return current / start


class Observations:
    """Streaming EMAs, baselines and the reward window behind every StepView."""

    def __init__(self, context: RunContext, common: Thresholds) -> None:
        self.first_step: int | None = None
        self.emas = {name: Ema(_half_life(name, common)) for name in SMOOTHED_SIGNALS}
        self.baselines = {name: Baseline() for name in SMOOTHED_SIGNALS}
        self.rewards = SquaresWindow(REWARD_WINDOW_POINTS)
        self.reward_low: float | None = None
        self.reward_high: float | None = None
        self._context = context
        self._common = common
        planned = context.planned_steps or 0.0
        self._warmup = max(common["warmup_steps"], common["warmup_fraction"] * planned)
        # Current EMA values and baselines, kept up to date in place (the views share them).
        self._smoothed: dict[str, float | None] = {}
        self._baseline_values: dict[str, float | None] = {}
        self._reward: RewardState = _NO_REWARD  # valid until the next reward point
        self._alpha_one: dict[str, float] = {}
        self._sync()

    def _sync(self) -> None:
        self._alpha_one = {name: ema.alpha(1) for name, ema in self.emas.items()}
        self._smoothed = {name: ema.value for name, ema in self.emas.items()}
        self._baseline_values = {name: base.value for name, base in self.baselines.items()}
        self._reward = self._reward_state()

    def dump(self) -> dict[str, Any]:
        return {
            "first_step": self.first_step,
            "emas": {name: ema.dump() for name, ema in self.emas.items()},
            "baselines": {name: base.dump() for name, base in self.baselines.items()},
            "rewards": self.rewards.dump(),
            "reward_low": self.reward_low,
            "reward_high": self.reward_high,
        }

    def load(self, state: dict[str, Any]) -> None:
        self.first_step = state["first_step"]
        for name, ema_state in state["emas"].items():
            self.emas[name].load(ema_state)
        for name, base_state in state["baselines"].items():
            self.baselines[name].load(base_state)
        self.rewards.load(state["rewards"])
        self.reward_low, self.reward_high = state["reward_low"], state["reward_high"]
        self._sync()

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
        kl_ref, kl_source = reference_kl(values, self._context.kl_placement)
        if kl_ref is not None:
            values["kl_ref"] = kl_ref
            if kl_ref - kl_ref == 0.0:
                finite["kl_ref"] = kl_ref
            elif finite is values:
                finite = {k: v for k, v in values.items() if k != "kl_ref"}
        emas, baselines, alpha_one = self.emas, self.baselines, self._alpha_one
        smoothed, baseline_values = self._smoothed, self._baseline_values
        for name in SMOOTHED_SIGNALS:
            value = finite.get(name)
            if value is None:
                continue
            ema = emas[name]  # Ema.update inlined, with alpha cached for the usual gap of 1
            last, current = ema.step, ema.value
            if current is None or last is None:
                current = value
            else:
                gap = step - last
                alpha = alpha_one[name] if gap == 1 else ema.alpha(max(gap, 1))
                current += alpha * (value - current)
            ema.value, ema.step = current, step
            smoothed[name] = current
            base = baselines[name]
            if base.value is None:
                baseline_values[name] = base.update(step, value)
        reward = finite.get("reward_mean")
        if reward is not None:
            self._observe_reward(step, reward)
            self._reward = self._reward_state()
        return StepView(
            step,
            step - self.first_step,
            self._warmup,
            values,
            smoothed,
            baseline_values,
            self._reward,
            kl_source,
            sources,
            finite,
        )

    def _observe_reward(self, step: int, reward: float) -> None:
        self.rewards.push(step, reward)
        low, high = self.reward_low, self.reward_high
        self.reward_low = reward if low is None else min(low, reward)
        self.reward_high = reward if high is None else max(high, reward)

    def _reward_bounds(self) -> tuple[float, float, str | None]:
        low, high = self._context.reward_min, self._context.reward_max
        if low is not None and high is not None and high > low:
            return low, high, None
        seen_low, seen_high = self.reward_low or 0.0, self.reward_high or 0.0
        if seen_low >= 0.0 and seen_high <= 1.0:
            return 0.0, 1.0, None if low is None and high is None else "assumed [0, 1]"
        if seen_high > seen_low:
            note = (
                f"rewards left [0, 1]; using the observed range [{seen_low:.4g}, {seen_high:.4g}]"
            )
            return seen_low, seen_high, note
        return 0.0, 1.0, "assumed [0, 1]"

    def _reward_state(self) -> RewardState:
        """Depends only on the reward window, bounds and the reward EMA and baseline: all three
        change only when a finite reward arrives, so it is rebuilt only then."""
        if not self.rewards:
            return _NO_REWARD
        common = self._common
        r_min, r_max, note = self._reward_bounds()
        span = r_max - r_min
        trend = self.rewards.trend(int(common["reward_trend_points"]))
        improving = (
            trend is not None
            and trend.t_stat > common["improving_t_stat"]
            and trend.fitted_rise > common["improving_rise"] * span
        )
        smoothed, start = self.emas["reward_mean"].value, self.baselines["reward_mean"].value
        gain = None if smoothed is None or start is None else smoothed - start
        stagnant = not improving and gain is not None and gain < common["stagnant_gain"] * span
        return RewardState(True, improving, stagnant, gain, r_min, r_max, trend, note, self.rewards)


def _half_life(name: str, common: Thresholds) -> float:
    return common[_FAST_SIGNALS.get(name, "half_life_other")]
