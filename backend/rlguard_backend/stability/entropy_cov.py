"""Optional leading indicator: the covariance probe Cov(log π, A) predicts entropy decline.

ΔH ≈ -Cov(log π, Δz) (DETECTORS.md §1): while the covariance of token log-prob and advantage
stays positive, updates keep spending entropy. Alert key ``entropy_cov_leading`` (INFO): the
probe was positive on >= 80 % of the last 20 points while entropy is still above half its
start, i.e. before D2 can fire. Clears after 10 points with the positive share below 50 %.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rlguard_backend.stability.base import Detector, Stops
from rlguard_backend.stability.columns import (
    Columns,
    Quiet,
    run_lengths,
    silent,
    window_shares,
)
from rlguard_backend.stability.context import RunContext
from rlguard_backend.stability.events import CLEARED, SEVERITY_RANK, Verdict
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.primitives import Window, rounded
from rlguard_backend.stability.thresholds import Thresholds


class EntropyCovLeading(Detector):
    """INFO ahead of D2 when the covariance probe says entropy is being spent."""

    id = "entropy_cov_leading"
    keys = ("entropy_cov_leading",)
    reads = frozenset({"cov_logp_adv"})

    def __init__(
        self, context: RunContext, thresholds: Thresholds, open_keys: set[str] | None = None
    ) -> None:
        super().__init__(context, thresholds, open_keys)
        self.covariances = Window(int(thresholds["window_points"]))
        self.quiet = 0

    def missing(self, seen: frozenset[str]) -> str | None:
        if "cov_logp_adv" not in seen:
            return "optional probe probe/cov_logp_adv not logged: no leading indicator"
        return None

    def quiet_prefix(self, cols: Columns) -> Quiet:
        th, n = self.th, cols.n
        covariances = cols.value("cov_logp_adv")
        if covariances is None:
            return silent(n)
        window = self.covariances
        positive = np.array(window, dtype=np.float64) > 0
        share, sizes = window_shares(positive, covariances > 0, window.maxlen or 0)
        early = (
            np.ones(n, dtype=np.bool_) if cols.rho is None else cols.rho > th["min_entropy_ratio"]
        )
        leading = (
            cols.warm & (sizes >= th["window_points"]) & (share >= th["positive_share"]) & early
        )
        quiet = run_lengths(share < th["clear_share"], self.quiet)
        stops = Stops(self, cols)
        stops.rule(
            "entropy_cov_leading", leading, SEVERITY_RANK["info"], quiet >= th["clear_steps"]
        )

        def advance(begin: int, end: int) -> None:
            window.extend(covariances[begin:end].tolist())
            self.quiet = int(quiet[end - 1])

        return stops.quiet(advance)

    def evaluate(self, view: StepView) -> Sequence[Verdict | None]:
        th = self.th
        covariance = view.finite("cov_logp_adv")
        if covariance is None:
            return ()
        self.covariances.append(covariance)
        values = self.covariances
        share = sum(value > 0 for value in values) / len(values)
        full = len(values) >= th["window_points"]
        rho = view.rho
        early = rho is None or rho > th["min_entropy_ratio"]
        leading = view.warm and full and share >= th["positive_share"] and early
        self.quiet = quiet = self.quiet + 1 if share < th["clear_share"] else 0
        if not leading:
            key = "entropy_cov_leading"
            return (CLEARED[key] if key in self.open_keys and quiet >= th["clear_steps"] else None,)
        if not view.emits(self.id, "entropy_cov_leading", "info"):
            return ()
        mean = sum(values) / len(values)
        return (
            Verdict(
                "entropy_cov_leading",
                "info",
                message=f"Cov(log π, A) has been positive on {share:.0%} of the last "
                f"{len(values)} points (mean {mean:.3g}): updates are raising already-likely "
                "tokens, so entropy will keep falling (ΔH ≈ -Cov).",
                evidence={"positive_share": share, "mean_cov": rounded(mean), "rho": rounded(rho)},
                advice=[
                    "Consider Clip-Cov / KL-Cov (policy_loss.loss_mode=clip_cov|kl_cov) before "
                    "entropy collapses; log pass@k to see whether exploration is being lost."
                ],
            ),
        )
