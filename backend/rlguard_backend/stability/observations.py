"""What every detector sees at a step: raw values, EMAs, baselines, the reward trend, warmup."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rlguard_backend.stability.context import RunContext
from rlguard_backend.stability.events import Action, Severity
from rlguard_backend.stability.primitives import (
    Baseline,
    Lookback,
    Series,
    Trend,
    Window,
    fit_trend,
    is_finite,
    json_safe,
    median,
    rounded,
)
from rlguard_backend.stability.thresholds import Thresholds

# Canonical signals smoothed and baselined for the detectors; "kl_ref" is derived (see below).
SMOOTHED_SIGNALS = (
    "entropy",
    "clipfrac",
    "reward_mean",
    "frac_zero_std",
    "kl_ref",
    "response_length",
    "response_clip_ratio",
    "rollout_kl",
    "rollout_logprob_diff",
    "rollout_is_ess",
    "rollout_is_mean",
    "rollout_tail_share",
    "rollout_logprob_diff_p99",
    "rollout_logprob_diff_max",
    "rollout_ratio_p01",
    "rollout_ratio_p99",
    "sample_degenerate",
    "sample_repetition",
    "rollout_staleness",
    "moe_max_vio",
    "moe_avg_vio",
)
_SMOOTHED = frozenset(SMOOTHED_SIGNALS)
_HALF_LIFE_THRESHOLD = {"entropy": "half_life_entropy", "clipfrac": "half_life_clipfrac"}
REWARD_WINDOW_POINTS = 50
RECENT_UPDATE_POINTS = 5  # the last |ppo_kl| points an update's KL jumps against


class RewardState:
    """Reward trend verdicts shared by D2, D3, D5, D8 (DETECTORS.md §2), refreshed in place at
    each finite reward point (it reads the reward window, never changes it).

    Improving: the line through the last reward_trend_points points rises by more than
    improving_rise x the range, with t > improving_t_stat. Stagnant: not improving, and the
    smoothed reward gained less than stagnant_gain x the range since its start.
    """

    def __init__(self, common: Thresholds, rewards: Series) -> None:
        self._rewards = rewards
        self._t_stat, self._rise_share = common["improving_t_stat"], common["improving_rise"]
        self._stagnant_share = common["stagnant_gain"]
        self._points = int(common["reward_trend_points"])
        self.refresh((0.0, 1.0, None), None)  # bounds' note: None when configured

    def refresh(self, bounds: tuple[float, float, str | None], gain: float | None) -> None:
        """Judge the reward window as it is now; `gain` is R̄ - R0."""
        self.known, self.gain = len(self._rewards.values) > 0, gain
        self.r_min, self.r_max, self.note = bounds
        self.range = self.r_max - self.r_min
        self._rise = self._rise_share * self.range
        steps, values, points = self._rewards.steps, self._rewards.values, self._points
        trend = self.trend = fit_trend(steps[-points:], values[-points:])
        self._long_trend: Trend | None = None
        self._long_known = False
        self.improving = (
            trend is not None and trend.fitted_rise > self._rise and trend.t_stat > self._t_stat
        )
        self.stagnant = (
            not self.improving and gain is not None and gain < self._stagnant_share * self.range
        )

    @property
    def long_trend(self) -> Trend | None:
        """Trend over the whole reward window (E3: last 50 points); computed only when asked."""
        if not self._long_known:
            rewards = self._rewards
            self._long_trend, self._long_known = fit_trend(rewards.steps, rewards.values[:]), True
        return self._long_trend

    @property
    def rising(self) -> bool:
        """Improving, or rising significantly over the whole window (its last 50 points)."""
        trend = self.long_trend
        return self.improving or (
            trend is not None and trend.fitted_rise > self._rise and trend.t_stat > self._t_stat
        )

    def change(self) -> str:
        """The reward's change since its start, as a sentence says it."""
        if self.gain is None:
            return "with no reward logged"
        if self.gain < 0:
            return f"while reward fell by {-self.gain:.2g}"
        return f"while reward rose by only {self.gain:.2g}"

    def verdict(self) -> str:
        """Why the reward counts as not improving, in words."""
        trend = self.trend
        if trend is None:
            return "reward has no trend yet"
        points = f"over its last {trend.points} points"
        return f"reward is not improving (trend t = {trend.t_stat:.2f} {points})"

    def evidence(self) -> dict[str, Any]:
        """The reward facts every reward-judging alert carries."""
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


_NO_VALUES: dict[str, float] = {}


def _per_signal() -> dict[str, float | None]:
    return dict.fromkeys(SMOOTHED_SIGNALS)


@dataclass(slots=True)
class StepView:
    """Read-only facts about one step, computed once and shared by all detectors.

    ``finite(name)`` is the canonical value when it is a finite number, else None: it is the
    bound ``get`` of a dict of the finite values, the hot path of every rule. One view per
    suite is refilled every step (detectors must not keep it past their evaluate()).
    """

    warmup_steps: float
    reward: RewardState
    # change(slot, severity): the event a firing rule (its events.slot_of) makes this step, or
    # None. When it makes none, the rule would change nothing: no message or evidence is built.
    change: Callable[[str, Severity], Action | None]
    # kl_ago(step, lag): the smoothed KL to the reference `lag` steps before `step` (D3, D5)
    kl_ago: Callable[[int, float], float | None]
    # canonical signal -> EMA (None before its first point), and its start value
    smoothed: dict[str, float | None] = field(default_factory=_per_signal)
    baselines: dict[str, float | None] = field(default_factory=_per_signal)
    step: int = 0
    steps_since_start: int = 0
    warm: bool = False  # past warmup W: only D1 and hard limits may fire before
    values: dict[str, float] = field(default_factory=dict)  # canonical signal -> raw value
    finite: Callable[[str], float | None] = _NO_VALUES.get
    all_finite: bool = True
    sources: dict[str, str] = field(default_factory=dict)  # canonical signal -> raw key
    # Each canonical signal the step logged (any value) with its raw keys, by name: the same
    # object at every step whose keys map onto the same signals (signal_stopped).
    logged: tuple[tuple[str, tuple[str, ...]], ...] = ()
    kl_source: str = ""
    rho: float | None = None  # smoothed entropy over its start
    length_ratio: float | None = None  # smoothed response length over its start
    # This step's |ppo_kl| is past D4's CRITICAL budget and ×median_factor the median of the
    # last few points: an abrupt jump, on which D6 escalates (a ramp past the budget is left to
    # D6's own c̄ > 0.2 rule: §4 S7 wants CRITICAL from step 108).
    update_kl_jump: bool = False
    # This step's KL to the reference is the second point in a row below reset_fraction x its
    # smoothed value: the reference was reset (to the current policy, ProRL-style) or swapped
    # for a nearer one. The KL's EMA restarts at this point (D3 starts a new baseline).
    kl_reset: bool = False


class Observations:
    """Streaming EMAs, baselines and the reward window behind every StepView.

    EMA with a half-life in steps: alpha = 1 - 2^(-min(1, gap/half_life)) per logged point.
    """

    def __init__(
        self,
        context: RunContext,
        thresholds: Mapping[str, Thresholds],
        change: Callable[[str, Severity], Action | None],
    ) -> None:
        common, spike = thresholds["common"], thresholds["kl_spike"]
        runaway = thresholds["kl_runaway"]
        self._reset_above, self._reset_fraction = runaway["floor"], runaway["reset_fraction"]
        kl_lookback = max(
            thresholds["kl_runaway"]["lookback_steps"],
            thresholds["kl_penalty"]["binding_lookback_steps"],
        )
        self.first_step: int | None = None
        self.baselines = {name: Baseline() for name in SMOOTHED_SIGNALS}
        self.rewards = Series(REWARD_WINDOW_POINTS)
        self.kl_history = Lookback(int(kl_lookback))  # the smoothed KL at its logged steps
        self.kl_drop_from: float | None = None  # the smoothed KL before a first low KL point
        # The last finite |ppo_kl| points (no more than D4's own window holds).
        self.update_kls = Window(min(RECENT_UPDATE_POINTS, int(spike["history_points"])))
        self.reward_low: float | None = None
        self.reward_high: float | None = None
        self._context = context
        self._half_lives = {
            name: common[_HALF_LIFE_THRESHOLD.get(name, "half_life_other")]
            for name in SMOOTHED_SIGNALS
        }
        self._alpha_one = {name: _alpha(half, 1) for name, half in self._half_lives.items()}
        self._ema_steps: dict[str, int | None] = dict.fromkeys(SMOOTHED_SIGNALS)
        self._kl_order = ("kl_loss", "reward_kl_penalty")
        if context.kl_placement == "reward":
            self._kl_order = ("reward_kl_penalty", "kl_loss")
        low, high = context.reward_min, context.reward_max
        self._bounds = (
            (low, high, None) if low is not None and high is not None and high > low else None
        )
        kappa = context.ppo_kl_target or spike["default_ppo_kl_target"]
        self._jump_above = spike["budget_critical"] * kappa
        self._jump_factor = spike["median_factor"]
        # No update can jump with one update per batch: the ratio is 1 by construction.
        self._jumps = context.updates_per_batch != 1
        planned = context.planned_steps or 0.0
        warmup = max(common["warmup_steps"], common["warmup_fraction"] * planned)
        self.view = StepView(warmup, RewardState(common, self.rewards), change, self.kl_history.ago)

    def dump(self) -> dict[str, Any]:
        """The state, JSON-safe (an EMA of finite points can still overflow)."""
        return {
            "first_step": self.first_step,
            "emas": {
                name: {"value": json_safe(value), "step": self._ema_steps[name]}
                for name, value in self.view.smoothed.items()
            },
            "baselines": {name: base.dump() for name, base in self.baselines.items()},
            "rewards": self.rewards.dump(),
            "kl_history": self.kl_history.dump(),
            "kl_drop_from": json_safe(self.kl_drop_from),
            "update_kls": self.update_kls.dump(),
            "reward_low": json_safe(self.reward_low),
            "reward_high": json_safe(self.reward_high),
        }

    def load(self, state: dict[str, Any]) -> None:
        """Continue from a dump()ed state."""
        self.first_step = state["first_step"]
        view = self.view
        for name, ema in state["emas"].items():
            view.smoothed[name], self._ema_steps[name] = ema["value"], ema["step"]
        for name, base_state in state["baselines"].items():
            self.baselines[name].load(base_state)
        view.baselines.update((name, base.value) for name, base in self.baselines.items())
        self.rewards.load(state["rewards"])
        self.kl_history.load(state["kl_history"])
        self.kl_drop_from = state["kl_drop_from"]
        self.update_kls.load(state["update_kls"])
        self.reward_low, self.reward_high = state["reward_low"], state["reward_high"]
        if self.rewards.values:
            self._refresh_reward()

    def observe(self, step: int, values: dict[str, float], sources: dict[str, str]) -> StepView:
        """Fold one step's canonical values in (taken over: the derived "kl_ref" is added) and
        return the shared view of it."""
        if self.first_step is None:
            self.first_step = step
        kl_ref, kl_source = self._reference_kl(values)
        if kl_ref is not None:
            values["kl_ref"] = kl_ref
        finite = values  # usually every value is finite: the step's own dict serves
        if not all(map(math.isfinite, values.values())):
            finite = {name: value for name, value in values.items() if math.isfinite(value)}
        view = self.view
        view.kl_reset = "kl_ref" in finite and self._kl_reset(finite["kl_ref"])
        self._smooth(step, finite)
        if "kl_ref" in finite:
            self.kl_history.push(step, view.smoothed["kl_ref"])  # type: ignore[arg-type]
        reward = finite.get("reward_mean")
        if reward is not None:
            self.rewards.push(step, reward)
            low, high = self.reward_low, self.reward_high
            self.reward_low = reward if low is None or reward < low else low
            self.reward_high = reward if high is None or reward > high else high
            self._refresh_reward()
        view.step = step
        view.steps_since_start = since = step - self.first_step
        view.warm = since >= view.warmup_steps
        view.values, view.sources, view.kl_source = values, sources, kl_source
        view.finite = finite.get
        view.all_finite = len(finite) == len(values)
        smoothed, baselines = view.smoothed, view.baselines
        view.rho = _ratio(smoothed["entropy"], baselines["entropy"])
        view.length_ratio = _ratio(smoothed["response_length"], baselines["response_length"])
        view.update_kl_jump = self._update_kl_jump(finite.get("ppo_kl"))
        return view

    def _kl_reset(self, kl_ref: float) -> bool:
        """Whether this KL point resets the reference (see StepView): the second point in a
        row below reset_fraction x the smoothed KL before the first (one low point of a noisy
        KL is no reset). Then the KL's EMA restarts at it."""
        smoothed = self.view.smoothed
        previous = smoothed["kl_ref"]
        if previous is None:
            return False
        high = previous if self.kl_drop_from is None else self.kl_drop_from
        if high < self._reset_above or kl_ref > self._reset_fraction * high:
            self.kl_drop_from = None
            return False
        if self.kl_drop_from is None:  # the first low point
            self.kl_drop_from = previous
            return False
        self.kl_drop_from, smoothed["kl_ref"] = None, None
        return True

    def _update_kl_jump(self, ppo_kl: float | None) -> bool:
        """Whether this step's |ppo_kl| jumps (see StepView); then it joins the last points."""
        if ppo_kl is None:
            return False
        size, recent = abs(ppo_kl), self.update_kls
        jump = (
            self._jumps
            and size > self._jump_above
            and len(recent) > 0
            and size > self._jump_factor * median(recent)
        )
        recent.append(size)
        return jump

    def _reference_kl(self, values: dict[str, float]) -> tuple[float | None, str]:
        """Per-token KL to the reference and where it came from (placement decides if both)."""
        for name in self._kl_order:
            if name in values:
                return values[name], name
        length = values.get("response_length")
        if "kl_ref_seq" in values and is_finite(length) and length:
            # Old TRL logs a per-sequence sum; thresholds are per token (DETECTORS.md §6).
            return values["kl_ref_seq"] / length, "kl_ref_seq / response_length"
        return None, ""

    def _smooth(self, step: int, finite: dict[str, float]) -> None:
        """Update the EMAs and baselines of the smoothed signals present this step."""
        smoothed, baselines, ema_steps = self.view.smoothed, self.view.baselines, self._ema_steps
        for name in _SMOOTHED.intersection(finite):  # each on its own: any order
            value = finite[name]
            current = smoothed[name]
            if current is None:  # its first point (the EMA and its step are set together)
                current = value
            else:
                gap = step - ema_steps[name]  # type: ignore[operator]
                alpha = self._alpha_one[name] if gap == 1 else _alpha(self._half_lives[name], gap)
                current += alpha * (value - current)
            smoothed[name], ema_steps[name] = current, step
            if baselines[name] is None:
                baselines[name] = self.baselines[name].update(step, value)

    def _observed_bounds(self) -> tuple[float, float, str | None]:
        """The reward range when the run config gives none: [0, 1] or the range seen."""
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

    def _refresh_reward(self) -> None:
        """Depends only on the reward window, bounds and the reward EMA and baseline: all three
        change only when a finite reward arrives, so it is refreshed only then."""
        smoothed, start = self.view.smoothed["reward_mean"], self.view.baselines["reward_mean"]
        gain = None if smoothed is None or start is None else smoothed - start
        self.view.reward.refresh(self._bounds or self._observed_bounds(), gain)


def _alpha(half_life_steps: float, gap: int) -> float:
    """Weight of a point `gap` steps after the previous one."""
    return 1.0 - 2.0 ** (-min(1.0, max(gap, 1) / half_life_steps))


def _ratio(current: float | None, start: float | None) -> float | None:
    """A smoothed value over its baseline (rho for entropy), None while either is unknown."""
    if current is None or not start:
        return None
    return current / start
