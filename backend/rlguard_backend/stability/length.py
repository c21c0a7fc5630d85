"""D8 (DETECTORS.md §3): reward-hacking and degeneration hints from response length.

The spec's "KL jumping with one reward component" hint needs per-component rewards, which no
canonical signal carries yet.
"""

from __future__ import annotations

from typing import ClassVar

from rlguard_backend.stability.events import Severity, capped
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.primitives import Lookback, rounded, times
from rlguard_backend.stability.rules import Detector, Facts, Need, Rule

LENGTH_ADVICE = [
    "Inspect samples for repetition, gibberish or reward hacking.",
    "Use token-level loss aggregation, overlong filtering or a soft overlong penalty (DAPO).",
]


class LengthHacking(Detector):
    """D8: responses blowing up into truncation, or collapsing to nothing."""

    id = "length"
    reads = Need(
        frozenset({"response_length", "response_clip_ratio"}),
        "no response length or truncation ratio logged: disabled",
    )

    def start(self) -> None:
        """The smoothed truncation share's history."""
        self.truncation_history = Lookback(int(self.thresholds["rise_lookback_steps"]))
        self._ratio = 1.0  # this step's length over its start
        self._has_ratio = False  # whether this step has one (the length rules' steps)

    needs = (
        Need(frozenset({"response_length"}), "no response length logged: length rules disabled"),
        Need(
            frozenset({"response_clip_ratio"}), "no truncation ratio logged: blow-up rule disabled"
        ),
    )

    def observe(self, view: StepView) -> bool:
        """This step's length ratio and truncation history (steps with a length ratio)."""
        ratio = view.length_ratio
        self._has_ratio = view.finite("response_length") is not None and ratio is not None
        if not self._has_ratio or ratio is None:
            return True
        self._ratio = ratio
        truncated = view.smoothed["response_clip_ratio"]
        if view.finite("response_clip_ratio") is not None and truncated is not None:
            self.truncation_history.push(view.step, truncated)
        return True

    def _truncated_before(self, view: StepView) -> float | None:
        return self.truncation_history.ago(view.step, self.thresholds["rise_lookback_steps"])

    def _blowup(self, view: StepView) -> Severity | None:
        thresholds, truncated = self.thresholds, view.smoothed["response_clip_ratio"]
        if truncated is None or self._ratio <= thresholds["blowup_factor"] or not view.warm:
            return None
        before = self._truncated_before(view)
        rising = before is not None and truncated - before > thresholds["truncation_rise"]
        if truncated <= thresholds["truncation"] or not rising or view.reward.improving:
            return None
        severity: Severity = "critical" if truncated > thresholds["truncation_critical"] else "warn"
        return capped(severity, not view.reward.known)

    def _blowup_settled(self, view: StepView) -> bool:
        thresholds, truncated = self.thresholds, view.smoothed["response_clip_ratio"]
        long = self._ratio > thresholds["blowup_factor"] and truncated is not None
        return not long or (truncated or 0.0) < thresholds["truncation"]

    def _describe_blowup(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        ratio, truncated = self._ratio, view.smoothed["response_clip_ratio"]
        facts: Facts = {
            "length_ratio": rounded(ratio),
            "truncated_fraction": rounded(truncated),
            "truncated_fraction_before": rounded(self._truncated_before(view)),
            **view.reward.evidence(),
        }
        if not view.reward.known:
            facts["degraded"] = "no reward logged: cannot tell if length bought reward"
        message = (
            f"Response length at {times(ratio)} its start with {truncated or 0:.0%} truncated "
            "and no reward gain — possible reward hacking/degeneration."
        )
        return message, facts

    def _collapsed(self, view: StepView) -> Severity | None:
        return "warn" if view.warm and self._ratio < self.thresholds["collapse_factor"] else None

    def _describe_collapse(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        message = (
            f"Responses collapsed to {self._ratio:.0%} of their starting length "
            f"({view.smoothed['response_length']:.3g} tokens) — degeneration or a reward that "
            "pays for brevity."
        )
        return message, {"length_ratio": rounded(self._ratio), **view.reward.evidence()}

    def _both_rising(self, view: StepView) -> Severity | None:
        factor, rho = self.thresholds["rise_factor"], view.rho
        rising = view.warm and rho is not None and rho > factor and self._ratio > factor
        return "info" if rising else None

    def _describe_entropy_rise(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        message = (
            f"Entropy ({times(view.rho or 0.0)} its start) and length ({times(self._ratio)}) are "
            "rising together: watch for gibberish and repetition."
        )
        return message, {"entropy_ratio": rounded(view.rho), "length_ratio": rounded(self._ratio)}

    def _truncated_at_floor(self, view: StepView) -> Severity | None:
        """Almost every response truncated while the reward sits within floor_margin x its
        range of the range's bottom. A reward below the range (rewards that are all one
        negative value leave the assumed [0, 1]) has no known floor: nothing is said."""
        truncated, reward = view.finite("response_clip_ratio"), view.finite("reward_mean")
        if truncated is None or reward is None:
            return None
        bottom = view.reward.r_min
        floor = bottom + self.thresholds["floor_margin"] * view.reward.range
        at_floor = bottom <= reward <= floor
        return "warn" if at_floor and truncated >= self.thresholds["truncation_at_floor"] else None

    def _describe_truncated_at_floor(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        truncated, reward = view.finite("response_clip_ratio") or 0.0, view.finite("reward_mean")
        low, high = view.reward.r_min, view.reward.r_max
        message = (
            f"{truncated:.0%} of the responses are truncated at step {view.step} while the reward "
            f"({reward:.3g}) sits at the bottom of its range ({low:.3g} to {high:.3g}): a "
            "degenerate batch, often right before NaNs (as in "
            "https://github.com/AgentR1/Agent-R1/issues/30)."
        )
        facts: Facts = {
            "truncated_fraction": rounded(truncated),
            "reward": rounded(reward),
            "reward_floor": rounded(low + self.thresholds["floor_margin"] * view.reward.range),
            **view.reward.evidence(),
        }
        return message, facts

    rules: ClassVar[tuple[Rule[LengthHacking], ...]] = (
        Rule(
            "length_blowup",
            signals=("response_length", "response_clip_ratio", "reward_mean"),
            fires=_blowup,
            persistence="persistence",
            clears=(_blowup_settled,),
            describe=_describe_blowup,
            advice=LENGTH_ADVICE,
            applies=lambda d, v: d._has_ratio,
        ),
        Rule(
            "length_collapse",
            signals=("response_length",),
            fires=_collapsed,
            persistence="persistence",
            describe=_describe_collapse,
            advice=LENGTH_ADVICE,
            applies=lambda d, v: d._has_ratio,
        ),
        Rule(
            "entropy_length_rise",
            signals=("response_length", "entropy"),
            fires=_both_rising,
            persistence="persistence",
            describe=_describe_entropy_rise,
            advice=LENGTH_ADVICE[:1],
            applies=lambda d, v: d._has_ratio,
        ),
        Rule(
            "truncated_at_floor",
            signals=("response_clip_ratio", "reward_mean"),
            fires=_truncated_at_floor,
            describe=_describe_truncated_at_floor,
            advice=[
                "Inspect samples for repetition or gibberish.",
                "Prepare to roll back; check for NaNs in the following steps.",
            ],
        ),
    )
