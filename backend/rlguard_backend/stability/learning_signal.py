"""E5 (DETECTORS.md, "E5 split"), a detector of its own: batches that carry no learning signal.

Saturation (reward near ``reward_max``: most groups all-correct, the data is too easy now) is
INFO; starvation (reward lower: groups all-wrong or identical) is WARN (DAPO §3.2).
"""

from __future__ import annotations

from typing import ClassVar

from rlguard_backend.stability.events import Severity
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.primitives import Window, rounded
from rlguard_backend.stability.rules import Detector, Facts, Need, Rule

SATURATED_ADVICE = [
    "The data is too easy now: dynamic sampling (drop all-correct groups, DAPO §3.2) or harder "
    "prompts.",
]
STARVED_ADVICE = [
    "Filter zero-std groups (dynamic sampling, DAPO) or adjust the data mix.",
    "If groups are all wrong, the task is too hard for the policy now: easier prompts or a "
    "warm-up on them.",
]


class LearningSignal(Detector):
    """E5: batches with no gradient, told apart by whether the reward is near its maximum."""

    id = "no_learning_signal"

    def start(self) -> None:
        """The window of which recent grad norms were exactly zero."""
        self.zero_grads = Window(int(self.thresholds["zero_grad_points"]))

    needs = (
        Need(
            frozenset({"frac_zero_std", "grad_norm"}),
            "no zero-std group fraction or grad norm logged: disabled",
        ),
    )

    def observe(self, view: StepView) -> bool:
        """Add whether this step's grad norm is exactly zero."""
        grad = view.finite("grad_norm")
        if grad is not None:
            self.zero_grads.append(1.0 if grad == 0.0 else 0.0)
        return True

    def _zero_share(self) -> float:
        """Share of exactly-zero grad norms among the last points (0 before 5 points)."""
        grads = self.zero_grads
        return sum(grads) / len(grads) if len(grads) >= 5 else 0.0

    def _saturated(self, view: StepView) -> bool:
        """The smoothed reward within saturated_margin of the range below its maximum."""
        reward, smoothed = view.reward, view.smoothed["reward_mean"]
        if not reward.known or smoothed is None:
            return False
        return smoothed >= reward.r_max - self.thresholds["saturated_margin"] * reward.range

    def _no_signal(self, view: StepView) -> Severity | None:
        thresholds, zero_std = self.thresholds, view.smoothed["frac_zero_std"]
        no_groups = zero_std is not None and zero_std >= thresholds["no_signal_groups"]
        if not view.warm or not (no_groups or self._zero_share() >= thresholds["zero_grad_share"]):
            return None
        return "info" if self._saturated(view) else "warn"

    def _describe(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        zero_share, zero_std = self._zero_share(), view.smoothed["frac_zero_std"]
        reward = view.smoothed["reward_mean"]
        facts = {
            "zero_grad_share": zero_share,
            "zero_std_fraction": rounded(zero_std),
            "reward": rounded(reward),
            "reward_max": rounded(view.reward.r_max),
            "saturated": severity == "info",
        }
        found = (
            f"grad norm exactly 0 on {zero_share:.0%} of the last points, "
            f"{zero_std or 0:.0%} of groups have all-equal rewards"
        )
        if severity == "info":
            message = (
                f"Reward is near its maximum ({reward or 0:.3g} of {view.reward.r_max:.3g}) and "
                f"most groups are all-correct ({found}): the data is too easy now."
            )
        else:
            message = (
                f"Batches carry no gradient ({found}) while reward is low: the policy gets no "
                "learning signal from them."
            )
        return message, facts

    rules: ClassVar[tuple[Rule[LearningSignal], ...]] = (
        Rule(
            "no_learning_signal",
            signals=("frac_zero_std", "grad_norm", "reward_mean"),
            fires=_no_signal,
            describe=_describe,
            advice=lambda d, severity: SATURATED_ADVICE if severity == "info" else STARVED_ADVICE,
        ),
    )
