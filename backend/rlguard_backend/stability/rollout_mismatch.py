"""D9 (DETECTORS.md, "v2 additions"): the inference engine's log-probs drifting from the
trainer's, so that PPO/GRPO treat off-policy rollouts as on-policy.

A level alone is model-dependent (dense models sit near 1e-4 nats/token, MoE models near
1e-2), so the gap is judged against the run's own start, and against absolute levels far
beyond MoE's normal range; the correlation of the two sides' probabilities and the
importance weights' effective sample size, when logged, say the same from other angles.

Means hide the tail: in TRL#6789 the mean |Δ log p| read 0.0007 while 7.5 % of the tokens had a
ratio outside [0.9, 1.1]. ``rollout_tail`` reads the tail itself: the share of tokens outside a
band and the 99th percentile of |Δ log p| (``rlguard.probes.rollout_tail``), the batch's largest
|Δ log p| (TRL) and the mean importance ratio after correction (TRL, verl), which masking drags
below 1 when the tail is cut away.
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
TAIL_ADVICE = [
    "Look per token, not per batch: top_p/top_k/min_p sampling against full-vocabulary "
    "trainer log-probs scales every ratio by the kept probability mass (TRL#6789); compare the "
    "engine's processed log-probs, temperature and dtype with the trainer's.",
    "Correct per token: truncated or masked importance sampling at the token level (TRL "
    "vllm_importance_sampling_mode token_truncate or token_mask, verl rollout_is: token) bounds "
    "what the tail does to the update.",
    "Compare one step's rollouts regenerated in BF16 with the engine's.",
]
TAIL_SIGNALS = (
    "rollout_tail_share",
    "rollout_logprob_diff_p99",
    "rollout_ratio_p01",
    "rollout_ratio_p99",
    "rollout_logprob_diff_max",
    "rollout_is_mean",
)
SIGNALS = (
    "rollout_kl",
    "rollout_logprob_diff",
    "rollout_probs_corr",
    "rollout_is_ess",
    *TAIL_SIGNALS,
)


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

    def _tail(self, view: StepView) -> Severity | None:
        thresholds = self.thresholds
        (share, share_start), (width, width_start), (extreme, extreme_start) = _tail_widths(view)
        skew = _log_distance(view.smoothed["rollout_is_mean"])
        if (
            share >= thresholds["share_critical"]
            or width >= thresholds["width_critical"]
            or skew >= math.log(thresholds["is_mean_critical"])
        ):
            return "critical"
        growth = thresholds["tail_growth"]
        warn = (
            share >= thresholds["share_warn"]
            or (share >= thresholds["share_floor"] and share >= growth * share_start)
            or width >= thresholds["width_warn"]
            or (width >= thresholds["width_floor"] and width >= growth * width_start)
            or skew >= math.log(thresholds["is_mean_warn"])
            or (
                extreme >= thresholds["extreme_floor"]
                and extreme >= thresholds["extreme_growth"] * extreme_start
            )
        )
        return "warn" if view.warm and warn else None

    def _describe_tail(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        smoothed, baselines, finite = view.smoothed, view.baselines, view.finite
        share, p99, largest = (
            smoothed["rollout_tail_share"],
            smoothed["rollout_logprob_diff_p99"],
            smoothed["rollout_logprob_diff_max"],
        )
        low, high = smoothed["rollout_ratio_p01"], smoothed["rollout_ratio_p99"]
        is_mean, mean = smoothed["rollout_is_mean"], smoothed["rollout_logprob_diff"]
        parts = []
        if share is not None:
            parts.append(f"{share:.0%} of the tokens have a ratio outside the band")
            parts[-1] += _start(baselines["rollout_tail_share"], ".0%")
        if p99 is not None:
            parts.append(f"1 % of them differ by {p99:.3g} nats or more in log-prob")
            parts[-1] += _start(baselines["rollout_logprob_diff_p99"], ".3g")
        if low is not None and high is not None:
            parts.append(f"1 % of the ratios lie below {low:.3g} and 1 % above {high:.3g}")
        if largest is not None:
            parts.append(f"the largest |Δ log p| of a token is {largest:.3g} nats")
            parts[-1] += _start(baselines["rollout_logprob_diff_max"], ".3g")
        if is_mean is not None:
            parts.append(f"the mean importance ratio is {is_mean:.3g}")
        hidden = "" if mean is None else f" while the mean |Δ log p| is only {mean:.2g}"
        message = (
            "The tail of the engine-vs-trainer gap is wide: "
            + "; ".join(parts)
            + f"{hidden}. On those tokens the importance ratios the update uses are wrong."
        )
        facts = {
            "tail_share": rounded(share),
            "tail_share_start": rounded(baselines["rollout_tail_share"]),
            "logprob_diff_p99": rounded(p99),
            "logprob_diff_p99_start": rounded(baselines["rollout_logprob_diff_p99"]),
            "ratio_p01": rounded(low),
            "ratio_p99": rounded(high),
            "logprob_diff_max": rounded(largest),
            "logprob_diff_max_start": rounded(baselines["rollout_logprob_diff_max"]),
            "ratio_min": rounded(finite("rollout_ratio_min")),
            "ratio_max": rounded(finite("rollout_ratio_max")),
            "is_ratio_mean": rounded(is_mean),
            "logprob_abs_diff_mean": rounded(mean),
        }
        return message, {k: v for k, v in facts.items() if v is not None}

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
        Rule(
            "rollout_tail",
            signals=TAIL_SIGNALS,
            fires=_tail,
            persistence="persistence",
            describe=_describe_tail,
            advice=TAIL_ADVICE,
        ),
    )


def _tail_widths(view: StepView) -> tuple[tuple[float, float], ...]:
    """(smoothed, start) of the share outside the band, the 1 % tail width in nats (p99
    |Δ log p|, else the ratio percentiles' log-distance from 1) and the batch's largest
    |Δ log p|; a measure not logged reads -inf (never fires)."""
    smoothed, baselines = view.smoothed, view.baselines
    width = _measure(smoothed["rollout_logprob_diff_p99"], baselines["rollout_logprob_diff_p99"])
    if width[0] == -math.inf:
        low, high = smoothed["rollout_ratio_p01"], smoothed["rollout_ratio_p99"]
        low_start, high_start = baselines["rollout_ratio_p01"], baselines["rollout_ratio_p99"]
        if low is not None and high is not None:
            start = math.inf  # unknown until both starts are
            if low_start is not None and high_start is not None:
                start = max(_log_distance(low_start), _log_distance(high_start))
            width = (max(_log_distance(low), _log_distance(high)), start)
    return (
        _measure(smoothed["rollout_tail_share"], baselines["rollout_tail_share"]),
        width,
        _measure(smoothed["rollout_logprob_diff_max"], baselines["rollout_logprob_diff_max"]),
    )


def _start(start: float | None, spec: str) -> str:
    """ " (start X)" for a message, or nothing while the start is unknown."""
    return "" if start is None else f" (start {start:{spec}})"


def _measure(value: float | None, start: float | None) -> tuple[float, float]:
    """A smoothed measure and its start: -inf when not logged; its start inf until known (no
    growth can be judged before)."""
    return (-math.inf if value is None else value, math.inf if start is None else start)


def _log_distance(ratio: float | None) -> float:
    """|ln ratio|: how far a ratio is from 1 either way (inf at 0: every token masked); 0 for
    a ratio not logged."""
    if ratio is None:
        return 0.0
    return math.inf if ratio <= 0 else abs(math.log(ratio))
