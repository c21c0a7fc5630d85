"""D8 (DETECTORS.md §3): reward-hacking hints from response length.

The spec's "KL jumping with one reward component" hint needs per-component rewards, which no
canonical signal carries yet.
"""

from __future__ import annotations

from typing import ClassVar

from rlguard_backend.stability.events import Severity, capped
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.primitives import Lookback, rounded
from rlguard_backend.stability.rules import Detector, Facts, Need, Rule

LENGTH_ADVICE = [
    "Inspect samples for repetition, gibberish or reward hacking.",
    "Use token-level loss aggregation, overlong filtering or a soft overlong penalty (DAPO).",
]


class LengthHacking(Detector):
    """D8: responses blowing up into truncation, or collapsing to nothing."""

    id = "length"
    reads = Need(frozenset({"response_length"}), "no response length logged: disabled")

    def start(self) -> None:
        """The smoothed truncation share's history."""
        self.truncation_history = Lookback(int(self.thresholds["rise_lookback_steps"]))
        self._ratio = 1.0  # this step's length over its start

    needs = (
        Need(
            frozenset({"response_clip_ratio"}), "no truncation ratio logged: blow-up rule disabled"
        ),
    )

    def observe(self, view: StepView) -> bool:
        """This step's length ratio and truncation history; False without a length ratio."""
        ratio = view.length_ratio
        if view.finite("response_length") is None or ratio is None:
            return False
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
            f"Response length ×{ratio:.3g} vs start with {truncated or 0:.0%} truncated "
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
            f"Entropy (×{view.rho:.3g}) and length (×{self._ratio:.3g}) are rising "
            "together: watch for gibberish and repetition."
        )
        return message, {"entropy_ratio": rounded(view.rho), "length_ratio": rounded(self._ratio)}

    rules: ClassVar[tuple[Rule[LengthHacking], ...]] = (
        Rule(
            "length_blowup",
            signals=("response_length", "response_clip_ratio", "reward_mean"),
            fires=_blowup,
            persistence="persistence",
            clears=(_blowup_settled,),
            describe=_describe_blowup,
            advice=LENGTH_ADVICE,
        ),
        Rule(
            "length_collapse",
            signals=("response_length",),
            fires=_collapsed,
            persistence="persistence",
            describe=_describe_collapse,
            advice=LENGTH_ADVICE,
        ),
        Rule(
            "entropy_length_rise",
            signals=("response_length", "entropy"),
            fires=_both_rising,
            persistence="persistence",
            describe=_describe_entropy_rise,
            advice=LENGTH_ADVICE[:1],
        ),
    )
