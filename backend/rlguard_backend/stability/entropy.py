"""D2 E1-E4 (DETECTORS.md §3): entropy spent without reward, exhausted, or blowing up; and
the covariance probe Cov(log π, A) as a leading indicator of its decline.

rho = smoothed entropy / its start (H0). E5 is a detector of its own (learning_signal.py).
"""

from __future__ import annotations

import math
from typing import ClassVar

from rlguard_backend.stability.events import Severity, capped
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.primitives import Lookback, Window, rounded
from rlguard_backend.stability.rules import Detector, Facts, Need, Rule

COLLAPSE_ADVICE = [
    "Lower LR or epochs (slows learning).",
    "KL to the initial policy with the k3+ gradient (costs pass@1).",
    "Small entropy bonus; watch for malformed outputs.",
    "Clip-higher (eps_high 0.28, DAPO), only if updates per batch > 1.",
    "Higher sampling temperature (only delays collapse).",
    "Clip-Cov / KL-Cov (policy_loss.loss_mode=clip_cov|kl_cov); adaptive entropy control "
    "(Skywork: target 0.2, coef step 1e-4, cap 0.005); dynamic sampling of zero-std groups (DAPO).",
    "Treat as a problem when pass@k drops or a known-good behaviour disappears; log pass@k.",
]
BLOWUP_ADVICE = [
    "Check the entropy coefficient (0.01 explodes; 1e-4..1e-3 is typical).",
    "Use token-mean loss aggregation; filter or softly penalise truncated samples.",
]


class EntropyCollapse(Detector):
    """D2 E1-E4: entropy spent without reward, exhausted, or blowing up."""

    id = "entropy_collapse"
    reads = Need(
        frozenset({"entropy"}), "no entropy logged (actor/entropy, entropy, ...): E1-E4 disabled"
    )

    def start(self) -> None:
        """The fit sums of R = b - a*exp(H) and the smoothed entropy's history."""
        # Running sums for the least-squares fit R = b - a * exp(H) (EM's empirical law).
        self.fit_sums = [0.0, 0.0, 0.0, 0.0, 0.0]  # n, sum x, sum y, sum xx, sum xy
        self.entropy_history = Lookback(int(self.thresholds["rise_window_steps"]))

    needs = (
        Need(frozenset({"reward_mean"}), "no reward logged: E1/E2 one level weaker, E3 disabled"),
        Need(
            frozenset({"frac_zero_std"}),
            "no zero-std group fraction logged: E3 stays INFO, E2 uses length and rho only",
        ),
    )

    def observe(self, view: StepView) -> bool:
        """Fold the entropy into its history and the ceiling fit; False until rho is known."""
        entropy, rho = view.finite("entropy"), view.rho
        if entropy is None or rho is None:
            return False
        smoothed = view.smoothed["entropy"]
        if smoothed is not None:
            self.entropy_history.push(view.step, smoothed)
        if view.warm and view.reward.known:
            reward = view.finite("reward_mean")
            if reward is not None and entropy <= 50:  # exp(H) overflows long before H matters
                x = math.exp(entropy)
                n, sx, sy, sxx, sxy = self.fit_sums
                self.fit_sums = [n + 1, sx + x, sy + reward, sxx + x * x, sxy + x * reward]
        return True

    def _collapse_severity(self, view: StepView) -> Severity | None:
        """E1/E2 at this step, before capping."""
        thresholds, reward, rho = self.thresholds, view.reward, view.rho
        if not view.warm or rho is None or rho >= thresholds["spent_ratio"]:
            return None
        zero_std, length_ratio = view.smoothed["frac_zero_std"], view.length_ratio
        identical = zero_std is not None and zero_std >= thresholds["identical_groups"]
        spent = reward.stagnant or not reward.known
        severe = (
            identical
            or (length_ratio is not None and length_ratio < thresholds["short_length_ratio"])
            or rho < thresholds["collapse_ratio"]
        )
        smoothed_reward = view.smoothed["reward_mean"]
        unsolved = (
            reward.known
            and smoothed_reward is not None
            and smoothed_reward < reward.r_max - thresholds["solved_margin"] * reward.range
        )
        if (spent and severe) or (identical and unsolved):
            return "critical"
        return "warn" if spent else None

    def _describe_collapse(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        facts = self._facts(view)
        if not view.reward.known:
            facts["degraded"] = "no reward logged: cannot tell whether entropy bought reward"
        critical = (self._collapse_severity(view) or severity) == "critical"
        label = "Entropy collapse" if critical else "Entropy spent, no reward bought"
        zero_std = facts["zero_std_fraction"]
        groups = (
            "" if zero_std is None else f" {zero_std:.0%} of groups now have identical rewards."
        )
        message = (
            f"{label}: policy entropy fell to {facts['rho']:.0%} of its start ("
            f"{facts['entropy_start']} -> {facts['entropy']} nats) {view.reward.change()}.{groups} "
            "Mechanism: updates that raise already-likely tokens shrink entropy "
            "(ΔH ≈ -Cov(log π, Δz))."
        )
        return message, facts

    def _facts(self, view: StepView) -> Facts:
        return {
            "entropy_start": rounded(view.baselines["entropy"]),
            "entropy": rounded(view.smoothed["entropy"]),
            "rho": rounded(view.rho),
            "zero_std_fraction": rounded(view.smoothed["frac_zero_std"]),
            "length_ratio": rounded(view.length_ratio),
            **view.reward.evidence(),
        }

    def _exhausted(self, view: StepView) -> Severity | None:
        thresholds, rho = self.thresholds, view.rho or 0.0
        entropy = view.smoothed["entropy"] or 0.0
        low = entropy < thresholds["exhausted_entropy"] or rho < thresholds["exhausted_ratio"]
        collapsing = self.progress["entropy_collapse"].active
        # The 50-point reward fit last: only when everything else holds.
        if not (low and view.warm and not collapsing and self._reward_flat(view)):
            return None
        zero_std = view.smoothed["frac_zero_std"]
        many_identical = zero_std is not None and zero_std >= thresholds["exhausted_groups_warn"]
        return "warn" if many_identical else "info"

    def _reward_flat(self, view: StepView) -> bool:
        """E3's reward plateau: the long trend's t-stat not significant, over enough points."""
        trend, thresholds = view.reward.long_trend, self.thresholds
        return (
            trend is not None
            and trend.points >= thresholds["exhausted_min_points"]
            and trend.t_stat < thresholds["exhausted_t_stat"]
        )

    def _describe_exhausted(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        facts = self._facts(view)
        ceiling = self._ceiling(view)
        facts["reward_ceiling"] = rounded(ceiling)
        message = (
            f"Entropy is exhausted (H {facts['entropy']} nats, {view.rho:.0%} of start) and "
            "reward has stopped improving: further gains are unlikely without more exploration."
        )
        if ceiling is not None:
            message += f" Fitted ceiling R = b - a*exp(H) at H=0: b - a ≈ {ceiling:.3g}."
        return message, facts

    def _ceiling(self, view: StepView) -> float | None:
        """b - a of R = b - a*exp(H), only once reward has risen enough for the fit to mean much."""
        gain = view.reward.gain
        if gain is None or gain < self.thresholds["ceiling_min_gain"] * view.reward.range:
            return None
        n, sx, sy, sxx, sxy = self.fit_sums
        denominator = n * sxx - sx * sx
        if n < 5 or denominator <= 0:
            return None
        slope = (n * sxy - sx * sy) / denominator  # = -a
        intercept = (sy - slope * sx) / n  # = b
        return intercept + slope

    def _blowup_limit(self, view: StepView) -> float:
        thresholds, start = self.thresholds, view.baselines["entropy"] or 0.0
        return max(thresholds["blowup_factor"] * start, start + thresholds["blowup_margin"])

    def _blowup(self, view: StepView) -> Severity | None:
        entropy = view.smoothed["entropy"] or 0.0
        return "warn" if view.warm and entropy > self._blowup_limit(view) else None

    def _describe_blowup(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        start, entropy = view.baselines["entropy"] or 0.0, view.smoothed["entropy"] or 0.0
        facts = {
            "entropy_start": rounded(start),
            "entropy": rounded(entropy),
            "limit": self._blowup_limit(view),
        }
        message = (
            f"Entropy rising sharply ({start:.3g} -> {entropy:.3g} nats): "
            "over-exploration/gibberish risk."
        )
        return message, facts

    def _rise(self, view: StepView) -> tuple[float, float] | None:
        """(entropy now, entropy rise_window_steps ago) when both are known."""
        now = view.smoothed["entropy"]
        before = self.entropy_history.ago(view.step, self.thresholds["rise_window_steps"])
        return None if now is None or before is None else (now, before)

    def _rising(self, view: StepView) -> Severity | None:
        """E4 slow rise: far above its start, still climbing, and buying no reward."""
        thresholds, rho = self.thresholds, view.rho
        if not view.warm or rho is None or rho < thresholds["rise_ratio"]:
            return None
        rise = self._rise(view)  # the history's lookup only when the cheap tests pass
        if rise is None:
            return None
        now, before = rise
        longer = view.length_ratio is not None and view.length_ratio >= thresholds["rise_ratio"]
        unrewarded = (view.reward.known and not view.reward.rising) or longer
        climbing = now >= before * (1 + thresholds["rise_gain"])
        return "warn" if climbing and unrewarded else None

    def _describe_rising(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        start, (now, before) = view.baselines["entropy"] or 0.0, self._rise(view) or (0.0, 0.0)
        window = int(self.thresholds["rise_window_steps"])
        facts = {
            "entropy_start": rounded(start),
            "entropy": rounded(now),
            f"entropy_{window}_steps_ago": rounded(before),
            "length_ratio": rounded(view.length_ratio),
            **view.reward.evidence(),
        }
        message = (
            f"Entropy keeps climbing: {start:.3g} -> {now:.3g} nats ({view.rho or 0:.1f}x its "
            f"start, +{now / before - 1 if before else 0:.0%} over the last {window} steps) "
            f"while {view.reward.verdict()}: outputs drift toward noise before they turn to "
            "gibberish."
        )
        return message, facts

    rules: ClassVar[tuple[Rule[EntropyCollapse], ...]] = (
        Rule(
            "entropy_collapse",
            signals=("entropy", "reward_mean", "frac_zero_std", "response_length"),
            fires=lambda d, v: capped(d._collapse_severity(v), not v.reward.known),
            persistence="persistence",
            # rho back above clear_ratio, or the reward trend improving
            clears=(
                lambda d, v: (v.rho or 0.0) > d.thresholds["clear_ratio"],
                lambda d, v: v.reward.improving,
            ),
            describe=_describe_collapse,
            advice=COLLAPSE_ADVICE,
        ),
        Rule(
            "entropy_exhausted",
            signals=("entropy", "reward_mean", "frac_zero_std"),
            fires=_exhausted,
            persistence="exhausted_persistence",
            describe=_describe_exhausted,
            advice=COLLAPSE_ADVICE,
        ),
        Rule(
            "entropy_blowup",
            signals=("entropy",),
            fires=_blowup,
            persistence="blowup_persistence",
            describe=_describe_blowup,
            advice=BLOWUP_ADVICE,
        ),
        Rule(
            "entropy_rising",
            signals=("entropy", "reward_mean", "response_length"),
            fires=_rising,
            persistence="rise_persistence",
            describe=_describe_rising,
            advice=BLOWUP_ADVICE,
        ),
    )


class EntropyCovLeading(Detector):
    """INFO ahead of D2 while Cov(log π, A) stays positive: ΔH ≈ -Cov(log π, Δz) (DETECTORS.md
    §1), so updates keep spending entropy before D2 can fire."""

    id = "entropy_cov_leading"
    reads = Need(
        frozenset({"cov_logp_adv"}),
        "optional probe probe/cov_logp_adv not logged: no leading indicator",
    )

    def start(self) -> None:
        """The window of the last covariances."""
        self.covariances = Window(int(self.thresholds["window_points"]))
        self._share = 0.0  # of positive covariances in the window, this step

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

    rules: ClassVar[tuple[Rule[EntropyCovLeading], ...]] = (
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
