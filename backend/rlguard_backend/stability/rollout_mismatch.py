"""D9 (DETECTORS.md, "v2 additions"): the inference engine's log-probs drifting from the
trainer's, so that PPO/GRPO treat off-policy rollouts as on-policy.

A level alone is model-dependent (dense models sit near 1e-4 nats/token, MoE models near
1e-2), so the gap is judged against the run's own start, and against absolute levels far
beyond MoE's normal range; the correlation of the two sides' probabilities and the
importance weights' effective sample size, when logged, say the same from other angles.
"""

from __future__ import annotations

import math
from typing import ClassVar

from rlguard_backend.stability.events import Severity
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.primitives import rounded
from rlguard_backend.stability.rules import Detector, Facts, Need, Rule

ADVICE = [
    "Check that the inference engine and the trainer agree: dtype (BF16 vs FP8), kernels, MoE "
    "routing, sampling parameters (temperature, top-p) applied to the logged log-probs.",
    "Compare one step's rollouts regenerated in BF16 with the engine's.",
    "Enable rollout correction (truncated or masked importance sampling: verl "
    "algorithm.rollout_correction, TIS/MIS) so the update accounts for the gap.",
]
ESS_ADVICE = [
    "The importance weights are degenerate: a few sequences carry the batch. Enable or tighten "
    "rollout correction (truncate the weights), and look for the engine-trainer gap behind it.",
]
SIGNALS = ("rollout_kl", "rollout_logprob_diff", "rollout_probs_corr", "rollout_is_ess")


class RolloutMismatch(Detector):
    """D9: the engine-trainer log-prob gap against its start and absolute levels; IS weights."""

    id = "rollout_mismatch"
    reads = Need(
        frozenset(SIGNALS), "no engine-vs-trainer statistics logged (rollout_corr/*): disabled"
    )

    def _gap(self, view: StepView) -> Severity | None:
        thresholds, (kl, diff, corr, growth) = self.thresholds, self._measures(view)
        if (
            kl >= thresholds["kl_level_critical"]
            or diff >= thresholds["logprob_diff_critical"]
            or corr < thresholds["corr_critical"]
            or (
                growth >= thresholds["kl_growth_critical"] and kl >= thresholds["kl_floor_critical"]
            )
        ):
            return "critical"
        warn = (
            kl >= thresholds["kl_level_warn"]
            or diff >= thresholds["logprob_diff_warn"]
            or (growth >= thresholds["kl_growth"] and kl >= thresholds["kl_floor"])
        )
        return "warn" if view.warm and warn else None

    @staticmethod
    def _measures(view: StepView) -> tuple[float, float, float, float]:
        """KL, log-prob gap, correlation and KL over its start; those not logged never fire."""
        kl, start = view.smoothed["rollout_kl"], view.baselines["rollout_kl"]
        diff, corr = view.smoothed["rollout_logprob_diff"], view.finite("rollout_probs_corr")
        return (
            -math.inf if kl is None else kl,
            -math.inf if diff is None else diff,
            math.inf if corr is None else corr,
            -math.inf if kl is None or not start else kl / start,
        )

    def _describe_gap(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        kl, start = view.smoothed["rollout_kl"], view.baselines["rollout_kl"]
        diff, corr = view.smoothed["rollout_logprob_diff"], view.finite("rollout_probs_corr")
        growth = None if kl is None or not start else round(kl / start, 1)
        parts = []
        if kl is not None:
            parts.append(f"KL of the engine's vs the trainer's log-probs is {kl:.3g} nats/token")
            if growth is not None:
                parts[-1] += f", {growth}x its start ({start:.3g})"
        if diff is not None:
            parts.append(f"their log-probs differ by {rounded(diff):.3g} per token")
        if corr is not None:
            parts.append(f"their probabilities correlate at {rounded(corr):.3f}")
        message = (
            "; ".join(parts) + ": the rollouts are more off-policy than the update assumes, "
            "so the importance ratios are wrong."
        )
        facts = {
            "rollout_kl": rounded(kl, 6),
            "rollout_kl_start": rounded(start, 6),
            "growth": growth,
            "logprob_abs_diff": rounded(diff),
            "probs_pearson_corr": rounded(corr),
        }
        return message, {k: v for k, v in facts.items() if v is not None}

    def _ess(self, view: StepView) -> Severity | None:
        ess, thresholds = view.smoothed["rollout_is_ess"], self.thresholds
        if ess is None or not view.warm:
            return None
        if ess < thresholds["ess_critical"]:
            return "critical"
        return "warn" if ess < thresholds["ess_warn"] else None

    def _describe_ess(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        ess = view.smoothed["rollout_is_ess"]
        message = (
            f"The rollout importance weights' effective sample size is {ess:.0%} of the batch: "
            "a few sequences carry the update."
        )
        return message, {"effective_sample_size": rounded(ess)}

    rules: ClassVar[tuple[Rule[RolloutMismatch], ...]] = (
        Rule(
            "rollout_mismatch",
            signals=("rollout_kl", "rollout_logprob_diff", "rollout_probs_corr"),
            fires=_gap,
            persistence="persistence",
            describe=_describe_gap,
            advice=ADVICE,
        ),
        Rule(
            "rollout_is_degenerate",
            signals=("rollout_is_ess",),
            fires=_ess,
            persistence="persistence",
            describe=_describe_ess,
            advice=ESS_ADVICE,
        ),
    )
