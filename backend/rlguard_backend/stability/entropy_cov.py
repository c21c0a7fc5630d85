"""Optional leading indicator: the covariance probe Cov(log π, A) predicts entropy decline.

ΔH ≈ -Cov(log π, Δz) (DETECTORS.md §1): while the covariance of token log-prob and advantage
stays positive, updates keep spending entropy, before D2 can fire.
"""

from __future__ import annotations

from rlguard_backend.stability.events import Severity
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.primitives import Window, rounded
from rlguard_backend.stability.rules import Detector, Facts, Rule


class EntropyCovLeading(Detector):
    """INFO ahead of D2 when the covariance probe says entropy is being spent."""

    id = "entropy_cov_leading"
    reads = frozenset({"cov_logp_adv"})

    def start(self) -> None:
        """The window of the last covariances."""
        self.covariances = Window(int(self.thresholds["window_points"]))
        self._share = 0.0  # of positive covariances in the window, this step

    needs = (
        ({"cov_logp_adv"}, "optional probe probe/cov_logp_adv not logged: no leading indicator"),
    )

    def observe(self, view: StepView) -> bool:
        """Add the covariance and its window's positive share; False when none is logged."""
        covariance = view.finite("cov_logp_adv")
        if covariance is None:
            return False
        values = self.covariances
        values.append(covariance)
        self._share = sum(value > 0 for value in values) / len(values)
        return True

    def _leading(self, view: StepView) -> Severity | None:
        thresholds, rho = self.thresholds, view.rho
        full = len(self.covariances) >= thresholds["window_points"]
        early = rho is None or rho > thresholds["min_entropy_ratio"]
        leading = view.warm and full and self._share >= thresholds["positive_share"] and early
        return "info" if leading else None

    def _describe(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        values, share = self.covariances, self._share
        mean = sum(values) / len(values)
        message = (
            f"Cov(log π, A) has been positive on {share:.0%} of the last {len(values)} points "
            f"(mean {mean:.3g}): updates are raising already-likely tokens, so entropy will "
            "keep falling (ΔH ≈ -Cov)."
        )
        return message, {
            "positive_share": share,
            "mean_cov": rounded(mean),
            "rho": rounded(view.rho),
        }

    rules = (
        Rule(
            "entropy_cov_leading",
            signals=("cov_logp_adv", "entropy"),
            fires=_leading,
            clears=(lambda d, v: d._share < d.thresholds["clear_share"],),
            describe=_describe,
            advice=[
                "Consider Clip-Cov / KL-Cov (policy_loss.loss_mode=clip_cov|kl_cov) before "
                "entropy collapses; log pass@k to see whether exploration is being lost."
            ],
        ),
    )
