"""D6 (DETECTORS.md §3): clip-fraction saturation, inert clipping, dual clip, clip asymmetry."""

from __future__ import annotations

from typing import ClassVar

from rlguard_backend.stability.events import Severity
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.primitives import median, rounded
from rlguard_backend.stability.rules import NEVER, Detector, Facts, Need, Rule

CLIP_ADVICE = [
    "Lower the learning rate.",
    "Reduce updates per batch (ppo_epochs, larger ppo_mini_batch_size); KL early-stop.",
    "Check rollout/trainer log-prob mismatch.",
    "If mostly upper-side clipping with collapsing entropy: clip-higher (eps_high 0.28, DAPO; "
    "0.4 ProRL), keeping eps_low ≈ 0.2 (raising it collapses the sampling space, DAPO §3.1).",
]


class ClipFraction(Detector):
    """D6: too many tokens clipped — updates overshoot the trust region."""

    id = "clipfrac"

    def start(self) -> None:
        """The clip-baseline points, the two saturation streaks, the one-off inactive note."""
        self.baseline_points: list[float] = []
        self.inactive_announced = False
        self.warn_streak = 0  # steps in a row c̄ > the warn level
        self.critical_streak = 0  # steps in a row c̄ > the critical level
        self._baseline: float | None = None  # median(baseline_points), a cache
        self._baseline_of = 0  # len(baseline_points) when _baseline was computed
        self._announce = False  # this step: clip_inactive says so, once
        self._warn_at = self._warn_level_of(None)  # the warn level (it moves with _baseline)

    needs = (
        Need(
            frozenset({"clipfrac"}),
            "no clip fraction logged (actor/pg_clipfrac, clip_ratio/region_mean)",
        ),
    )
    needs_context = (
        (
            "updates_per_batch",
            "no updates_per_batch in run config: cannot tell if clipping is inert",
        ),
    )

    def observe(self, view: StepView) -> bool:
        """Count the saturation streaks against this step's warn level (after warmup)."""
        self._announce = self.context.updates_per_batch == 1 and not self.inactive_announced
        self.inactive_announced = self.inactive_announced or self._announce
        clipfrac = view.finite("clipfrac")
        if clipfrac is not None:
            thresholds, smoothed = self.thresholds, view.smoothed["clipfrac"] or 0.0
            self._warn_at = self._warn_level(view, clipfrac)
            above_warn, above_critical = smoothed > self._warn_at, smoothed > thresholds["critical"]
            self.warn_streak = self.warn_streak + 1 if view.warm and above_warn else 0
            self.critical_streak = self.critical_streak + 1 if view.warm and above_critical else 0
        return True

    def _warn_level(self, view: StepView, clipfrac: float) -> float:
        """max(warn, factor x c_b), c_b the median clip fraction over steps W..W+20."""
        since_warm = view.steps_since_start - view.warmup_steps
        points = self.baseline_points
        if 0 <= since_warm <= self.thresholds["baseline_steps"]:
            points.append(clipfrac)
        if len(points) != self._baseline_of:  # the points are only ever appended to
            self._baseline = median(points) if points else None
            self._baseline_of = len(points)
            self._warn_at = self._warn_level_of(self._baseline)
        return self._warn_at

    def _warn_level_of(self, baseline: float | None) -> float:
        return max(self.thresholds["warn"], self.thresholds["baseline_factor"] * (baseline or 0.0))

    def _describe_inactive(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        message = (
            "Clipping inactive (ratio ≡ 1 with one update per batch): clip and clip-higher "
            "settings have no effect; ppo_kl and clip fraction are 0 by construction."
        )
        return message, {"updates_per_batch": 1}

    def _dual(self, view: StepView) -> Severity | None:
        dual = view.finite("clipfrac_dual")
        return "warn" if dual is not None and dual > self.thresholds["dual_clip"] else None

    def _describe_dual(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        dual, streak = view.finite("clipfrac_dual") or 0.0, self.progress["dual_clip"].streak
        message = (
            f"Dual-clip active on {dual:.2%} of tokens for {streak} points: tokens with "
            "negative advantage have ratio > clip_ratio_c (log-ratio > 1.1)."
        )
        return message, {"clipfrac_dual": rounded(dual), "points": streak}

    def _lopsided(self, view: StepView) -> Severity | None:
        high, low = view.finite("clipfrac_high"), view.finite("clipfrac_low")
        if high is None or low is None:
            return None
        thresholds = self.thresholds
        lopsided = (
            high > thresholds["asymmetry_factor"] * low and high > thresholds["asymmetry_floor"]
        )
        return "info" if lopsided else None

    def _describe_lopsided(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        high, low = view.finite("clipfrac_high") or 0.0, view.finite("clipfrac_low") or 0.0
        message = (
            f"Upper clip binds ({high:.2%} vs lower {low:.2%}): positive-advantage, mostly "
            "low-probability tokens are clipped (DAPO found clipped tokens have π < 0.2)."
        )
        return message, {"clipfrac_high": rounded(high), "clipfrac_low": rounded(low)}

    def _saturated(self, view: StepView) -> Severity | None:
        thresholds = self.thresholds
        saturated = self.warn_streak >= thresholds["warn_persistence"]
        critical = self.critical_streak >= thresholds["critical_persistence"]
        if critical or (saturated and view.update_kl_jump):
            return "critical"
        return "warn" if saturated else None

    def _describe_saturated(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        smoothed, baseline = view.smoothed["clipfrac"] or 0.0, self._baseline
        facts = {
            "clipfrac": rounded(smoothed),
            "clipfrac_baseline": rounded(baseline),
            "warn_threshold": rounded(self._warn_at),
            "with_kl_spike": view.update_kl_jump,
        }
        message = (
            f"{smoothed:.1%} of tokens are clipped (baseline {baseline or 0:.2%}): updates "
            "overshoot the trust region and clipped tokens contribute no gradient."
        )
        return message, facts

    rules: ClassVar[tuple[Rule[ClipFraction], ...]] = (
        Rule(
            "clip_inactive",
            signals=(),
            fires=lambda d, v: "info" if d._announce else None,
            clears=NEVER,
            enabled=lambda d: d.context.updates_per_batch == 1,
            describe=_describe_inactive,
            advice=["Use more updates per batch only if you want the clip to act."],
        ),
        Rule(
            "dual_clip",
            signals=("clipfrac_dual",),
            fires=_dual,
            persistence="dual_persistence",
            describe=_describe_dual,
            advice=CLIP_ADVICE[:3],
        ),
        Rule(
            "clip_asymmetry",
            signals=("clipfrac_high", "clipfrac_low"),
            fires=_lopsided,
            persistence="asymmetry_persistence",
            describe=_describe_lopsided,
            advice=[CLIP_ADVICE[3]],
        ),
        Rule(
            "clipfrac",
            signals=("clipfrac", "ppo_kl"),
            fires=_saturated,
            clears=(lambda d, v: (v.smoothed["clipfrac"] or 0.0) < d.thresholds["clear"],),
            describe=_describe_saturated,
            advice=CLIP_ADVICE,
            applies=lambda d, v: v.finite("clipfrac") is not None,
        ),
    )
