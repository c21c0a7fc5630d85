"""D6: clip-fraction saturation (DETECTORS.md §3 D6).

Alert keys: ``clipfrac`` (WARN c̄ > max(0.05, 10 c_b) for 5 points; CRITICAL c̄ > 0.2 for 3, or
saturated clipping plus a D4 CRITICAL outlier spike; clears after 10 points with c̄ < 0.025),
``clip_inactive`` (INFO once when U == 1), ``dual_clip`` (WARN, verl pg_clipfrac_lower > 1e-3
for 5 points), ``clip_asymmetry`` (INFO, TRL upper-side clipping > 5x lower and > 0.01).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rlguard_backend.stability.base import Detector, Stops
from rlguard_backend.stability.columns import (
    NOT_QUIET,
    Columns,
    Quiet,
    first,
    run_lengths,
)
from rlguard_backend.stability.context import RunContext
from rlguard_backend.stability.events import CLEARED, SEVERITY_RANK, Severity, Verdict
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.primitives import median, rounded
from rlguard_backend.stability.thresholds import Thresholds

INFO, WARN, CRITICAL = SEVERITY_RANK["info"], SEVERITY_RANK["warn"], SEVERITY_RANK["critical"]
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
    keys = ("clipfrac", "clip_inactive", "dual_clip", "clip_asymmetry")

    def __init__(
        self, context: RunContext, thresholds: Thresholds, open_keys: set[str] | None = None
    ) -> None:
        super().__init__(context, thresholds, open_keys)
        self.baseline_points: list[float] = []
        self._baseline_median: float | None = None  # median(baseline_points), a cache
        self._baseline_of = 0  # len(baseline_points) when _baseline_median was computed
        self.inactive_announced = False
        self.warn_streak = 0
        self.critical_streak = 0
        self.calm_streak = 0
        self.dual_streak = 0
        self.dual_quiet = 0
        self.asymmetry_streak = 0
        self.asymmetry_quiet = 0

    def missing(self, seen: frozenset[str]) -> str | None:
        if "clipfrac" not in seen:
            return "no clip fraction logged (actor/pg_clipfrac, clip_ratio/region_mean)"
        if self.context.updates_per_batch is None:
            return "no updates_per_batch in run config: cannot tell if clipping is inert"
        return None

    def evaluate(self, view: StepView) -> Sequence[Verdict | None]:
        inactive = None
        if self.context.updates_per_batch == 1 and not self.inactive_announced:
            inactive = self._inactive()
        clipfrac = view.finite("clipfrac")
        return (
            inactive,
            self._dual(view),
            self._asymmetry(view),
            None if clipfrac is None else self._saturation(view, clipfrac),
        )

    def quiet_prefix(self, cols: Columns) -> Quiet:
        th, n = self.th, cols.n
        if self.context.updates_per_batch == 1 and not self.inactive_announced:
            return NOT_QUIET  # clip_inactive is announced at the next step
        dual = cols.value("clipfrac_dual")
        high = np.zeros(n, dtype=np.bool_) if dual is None else dual > th["dual_clip"]
        high_values, low_values = cols.value("clipfrac_high"), cols.value("clipfrac_low")
        lopsided = np.zeros(n, dtype=np.bool_)
        if high_values is not None and low_values is not None:
            lopsided = (high_values > th["asymmetry_factor"] * low_values) & (
                high_values > th["asymmetry_floor"]
            )
        counts = {
            "dual_streak": run_lengths(high, self.dual_streak),
            "dual_quiet": run_lengths(~high, self.dual_quiet),
            "asymmetry_streak": run_lengths(lopsided, self.asymmetry_streak),
            "asymmetry_quiet": run_lengths(~lopsided, self.asymmetry_quiet),
        }
        clear_steps = th["clear_steps"]
        stops = Stops(self, cols)
        stops.rule(
            "dual_clip",
            counts["dual_streak"] >= th["dual_persistence"],
            WARN,
            counts["dual_quiet"] >= clear_steps,
        )
        stops.rule(
            "clip_asymmetry",
            counts["asymmetry_streak"] >= th["asymmetry_persistence"],
            INFO,
            counts["asymmetry_quiet"] >= clear_steps,
        )
        smoothed = cols.smoothed["clipfrac"]
        if cols.value("clipfrac") is not None and smoothed is not None:
            # While the baseline takes its points (steps W..W+20), feed() does; the steps
            # since the warm-up only go up.
            since_warm = cols.since - cols.warmup_steps
            if since_warm[-1] >= 0 and since_warm[0] <= th["baseline_steps"]:
                baseline = (since_warm >= 0) & (since_warm <= th["baseline_steps"])
                stops.cannot_tell(first(baseline))
            points = self.baseline_points
            warn_at = max(th["warn"], th["baseline_factor"] * (median(points) if points else 0.0))
            warm = cols.warm
            counts["calm_streak"] = calm = run_lengths(smoothed < th["clear"], self.calm_streak)
            if float(smoothed.max()) <= min(warn_at, th["critical"]):  # neither level crossed
                counts["warn_streak"] = counts["critical_streak"] = np.zeros(n, dtype=np.int64)
                stops.clears("clipfrac", calm)
            else:
                counts["warn_streak"] = warn = run_lengths(
                    warm & (smoothed > warn_at), self.warn_streak
                )
                counts["critical_streak"] = critical = run_lengths(
                    warm & (smoothed > th["critical"]), self.critical_streak
                )
                critical_firing = critical >= th["critical_persistence"]
                firing = critical_firing | (warn >= th["warn_persistence"])
                rank = np.where(critical_firing, CRITICAL, WARN)
                stops.rule("clipfrac", firing, rank, calm >= clear_steps)

        def advance(begin: int, end: int) -> None:
            for name, column in counts.items():
                setattr(self, name, int(column[end - 1]))

        return stops.quiet(advance)

    def load(self, state: dict[str, Any]) -> None:
        super().load(state)
        self._baseline_median, self._baseline_of = None, 0

    def _baseline(self, view: StepView, clipfrac: float) -> float | None:
        """c_b: median clip fraction over steps W..W+20 (frozen afterwards)."""
        since_warm = view.steps_since_start - view.warmup_steps
        points = self.baseline_points
        if 0 <= since_warm <= self.th["baseline_steps"]:
            points.append(clipfrac)
        if len(points) != self._baseline_of:  # the points are only ever appended to
            self._baseline_median = median(points) if points else None
            self._baseline_of = len(points)
        return self._baseline_median

    def _saturation(self, view: StepView, clipfrac: float) -> Verdict | None:
        th, smoothed = self.th, view.smoothed["clipfrac"] or 0.0
        baseline = self._baseline(view, clipfrac)
        warn_at = max(th["warn"], th["baseline_factor"] * (baseline or 0.0))
        self.warn_streak = warn_streak = (
            self.warn_streak + 1 if view.warm and smoothed > warn_at else 0
        )
        self.critical_streak = critical_streak = (
            self.critical_streak + 1 if view.warm and smoothed > th["critical"] else 0
        )
        self.calm_streak = calm = self.calm_streak + 1 if smoothed < th["clear"] else 0
        severity: Severity | None = None
        with_spike = view.kl_spike_jump
        saturated = warn_streak >= th["warn_persistence"]
        if critical_streak >= th["critical_persistence"] or (saturated and with_spike):
            severity = "critical"
        elif saturated:
            severity = "warn"
        if severity is None:
            key = "clipfrac"
            return CLEARED[key] if key in self.open_keys and calm >= th["clear_steps"] else None
        if not view.emits(self.id, "clipfrac", severity):
            return None
        facts: dict[str, Any] = {
            "clipfrac": rounded(smoothed),
            "clipfrac_baseline": rounded(baseline),
            "warn_threshold": rounded(warn_at),
            "with_kl_spike": with_spike,
        }
        return Verdict(
            "clipfrac",
            severity,
            message=f"{smoothed:.1%} of tokens are clipped (baseline {baseline or 0:.2%}): updates "
            "overshoot the trust region and clipped tokens contribute no gradient.",
            evidence=facts,
            advice=CLIP_ADVICE,
        )

    def _inactive(self) -> Verdict:
        """Once, when U == 1: the clip cannot act."""
        self.inactive_announced = True
        return Verdict(
            "clip_inactive",
            "info",
            message="Clipping inactive (ratio ≡ 1 with one update per batch): clip and "
            "clip-higher settings have no effect; ppo_kl and clip fraction are 0 by construction.",
            evidence={"updates_per_batch": 1},
            advice=["Use more updates per batch only if you want the clip to act."],
        )

    def _dual(self, view: StepView) -> Verdict | None:
        th, dual = self.th, view.finite("clipfrac_dual")
        high = dual is not None and dual > th["dual_clip"]
        self.dual_streak = streak = self.dual_streak + 1 if high else 0
        self.dual_quiet = quiet = self.dual_quiet + 1 if not high else 0
        if streak < th["dual_persistence"]:
            key = "dual_clip"
            return CLEARED[key] if key in self.open_keys and quiet >= th["clear_steps"] else None
        if not view.emits(self.id, "dual_clip", "warn"):
            return None
        return Verdict(
            "dual_clip",
            "warn",
            message=f"Dual-clip active on {dual:.2%} of tokens for {streak} points: tokens with "
            "negative advantage have ratio > clip_ratio_c (log-ratio > 1.1).",
            evidence={"clipfrac_dual": rounded(dual), "points": streak},
            advice=CLIP_ADVICE[:3],
        )

    def _asymmetry(self, view: StepView) -> Verdict | None:
        high, low = view.finite("clipfrac_high"), view.finite("clipfrac_low")
        th = self.th
        lopsided = (
            high is not None
            and low is not None
            and high > th["asymmetry_factor"] * low
            and high > th["asymmetry_floor"]
        )
        self.asymmetry_streak = streak = self.asymmetry_streak + 1 if lopsided else 0
        self.asymmetry_quiet = quiet = self.asymmetry_quiet + 1 if not lopsided else 0
        if streak < th["asymmetry_persistence"]:
            key = "clip_asymmetry"
            return CLEARED[key] if key in self.open_keys and quiet >= th["clear_steps"] else None
        if not view.emits(self.id, "clip_asymmetry", "info"):
            return None
        return Verdict(
            "clip_asymmetry",
            "info",
            message=f"Upper clip binds ({high:.2%} vs lower {low:.2%}): positive-advantage, mostly "
            "low-probability tokens are clipped (DAPO found clipped tokens have π < 0.2).",
            evidence={"clipfrac_high": rounded(high), "clipfrac_low": rounded(low)},
            advice=[CLIP_ADVICE[3]],
        )
