"""D5: KL penalty too strong, or binding (DETECTORS.md §3 D5). Active when beta > 0, t >= 30.

Alert keys: ``kl_penalty_strong`` (WARN: reward stagnant and either the policy is not moving —
KL < 0.02 with entropy > 0.8 of start — or the in-reward penalty share s >= 0.5, P=10) and
``kl_binding`` (INFO: reward stagnant and KL flat at >= 0.02 for 20 points: consider a reference
reset). Both clear after 10 consecutive points of an improving reward trend.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rlguard_backend.stability.base import Detector, Stops, capped
from rlguard_backend.stability.columns import (
    NOT_QUIET,
    Columns,
    Floats,
    Quiet,
    ago,
    anywhere,
    everywhere,
    integral,
    push_points,
    run_lengths,
    silent,
)
from rlguard_backend.stability.context import RunContext
from rlguard_backend.stability.events import CLEARED, SEVERITY_RANK, Verdict
from rlguard_backend.stability.kl_reference import current_beta, penalty_share
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.primitives import Lookback, rounded
from rlguard_backend.stability.thresholds import Thresholds

STRONG_ADVICE = [
    "Sweep beta down on a log grid (per-sequence penalty ≈ beta·KL·length vs reward gaps).",
    "Use an adaptive controller with a target KL.",
    "For verifiable rewards, drop the KL term (DAPO §2.3, DeepSWE).",
    "If KL has plateaued at a nonzero level, reset the reference to the current policy and "
    "reinitialise the optimizer (ProRL).",
]


class KlPenalty(Detector):
    """D5: a KL penalty that holds the policy still while reward stagnates."""

    id = "kl_penalty"
    keys = ("kl_penalty_strong", "kl_binding")
    reads = frozenset({"kl_loss", "reward_kl_penalty", "kl_ref_seq"})  # kl_ref comes from these

    def __init__(
        self, context: RunContext, thresholds: Thresholds, open_keys: set[str] | None = None
    ) -> None:
        super().__init__(context, thresholds, open_keys)
        self.history = Lookback(int(thresholds["binding_lookback_steps"]))
        self.strong_streak = 0
        self.binding_streak = 0
        self.improving_streak = 0

    def missing(self, seen: frozenset[str]) -> str | None:
        if not seen & {"kl_coef", "reward_kl_coef"} and self.context.kl_coef is None:
            return "no KL coefficient logged or in run config (kl_coef): disabled"
        if "reward_mean" not in seen:
            return "no reward logged: disabled"
        return None

    def evaluate(self, view: StepView) -> Sequence[Verdict | None]:
        kl = view.smoothed["kl_ref"]
        beta = current_beta(view, self.context)
        if view.finite("kl_ref") is None or kl is None or not beta or beta <= 0:
            return ()
        self.history.push(view.step, kl)
        active = view.steps_since_start >= self.th["min_step"] and view.reward.known
        self.improving_streak = improving = (
            self.improving_streak + 1 if view.reward.improving else 0
        )
        clears = improving >= self.th["clear_steps"]
        stagnant = active and view.reward.stagnant
        return (
            self._strong(view, kl, beta, stagnant, clears),
            self._binding(view, kl, stagnant, clears),
        )

    def quiet_prefix(self, cols: Columns) -> Quiet:
        th, n = self.th, cols.n
        kl, beta = cols.smoothed["kl_ref"], self._beta_column(cols)
        if cols.value("kl_ref") is None or kl is None or beta is None:
            return silent(n)
        positive = beta > 0
        if not anywhere(positive):
            return silent(n)
        lag = th["binding_lookback_steps"]
        if self.context.kl_placement == "reward" or not everywhere(positive) or not integral(lag):
            return NOT_QUIET  # the penalty share, or beta switching on and off: step by step
        improving = run_lengths(cols.improving, self.improving_streak)
        clears = improving >= th["clear_steps"]
        stagnant = (cols.since >= th["min_step"]) & cols.reward_known & cols.stagnant
        unmoved = kl < th["small_kl"]
        if cols.rho is not None:
            unmoved &= cols.rho > th["unmoved_entropy_ratio"]
        strong = run_lengths(stagnant & unmoved, self.strong_streak)
        candidates = stagnant & (kl >= th["small_kl"])
        if anywhere(candidates):  # KL flat over the lookback decides
            before, known = ago(self.history, cols.steps, kl, lag)
            change = np.full(n, np.inf)
            np.divide(kl, before, out=change, where=known & (before > 0))
            candidates &= np.abs(change - 1) < th["binding_flatness"]
        binding = run_lengths(candidates, self.binding_streak)
        # Firing while open and not due for an update says nothing (AlertBook.emits).
        strong_firing = strong >= th["persistence"]
        binding_firing = binding >= th["binding_persistence"]
        reported = SEVERITY_RANK[capped("warn", cols.rho is None)]
        stops = Stops(self, cols)  # both clear on an improving reward while not firing
        stops.rule("kl_penalty_strong", strong_firing, reported, clears)
        stops.rule("kl_binding", binding_firing, SEVERITY_RANK["info"], clears)

        def advance(begin: int, end: int) -> None:
            push_points(self.history, cols.step_list[begin:end], kl[begin:end])
            self.improving_streak = int(improving[end - 1])
            self.strong_streak, self.binding_streak = int(strong[end - 1]), int(binding[end - 1])

        return stops.quiet(advance)

    def _beta_column(self, cols: Columns) -> Floats | None:
        """current_beta() at each step: the logged coefficient, else the configured one."""
        first_key, second_key = "kl_coef", "reward_kl_coef"
        if self.context.kl_placement == "reward":
            first_key, second_key = second_key, first_key
        for key in (first_key, second_key):
            column = cols.value(key)
            if column is not None:
                return column
        beta = self.context.kl_coef
        return None if beta is None else np.full(cols.n, beta)

    def _flat(self, step: int, kl: float) -> bool:
        """KL within binding_flatness of its value binding_lookback_steps ago."""
        before = self.history.ago(step, self.th["binding_lookback_steps"])
        return (
            before is not None and before > 0 and abs(kl / before - 1) < self.th["binding_flatness"]
        )

    def _strong(
        self, view: StepView, kl: float, beta: float, stagnant: bool, clears: bool
    ) -> Verdict | None:
        th = self.th
        rho = view.rho
        share = penalty_share(view, beta) if self.context.kl_placement == "reward" else None
        unmoved = kl < th["small_kl"] and (rho is None or rho > th["unmoved_entropy_ratio"])
        dominant = share is not None and share >= th["strong_share"]
        self.strong_streak = streak = (
            self.strong_streak + 1 if stagnant and (unmoved or dominant) else 0
        )
        if streak < th["persistence"]:
            key = "kl_penalty_strong"
            return CLEARED[key] if key in self.open_keys and clears else None
        reported = capped("warn", rho is None and not dominant)
        if not view.emits(self.id, "kl_penalty_strong", reported):
            return None
        facts: dict[str, Any] = {
            "kl": rounded(kl),
            "beta": beta,
            "entropy_ratio": rounded(rho),
            "penalty_share": rounded(share),
            "stagnant_points": streak,
            **view.reward.evidence(),
        }
        if rho is None:
            facts["degraded"] = "no entropy logged: 'policy not moving' judged from KL alone"
        held = f" and entropy is still at {rho:.0%} of its start" if rho is not None else ""
        return Verdict(
            "kl_penalty_strong",
            reported,
            message=f"KL penalty dominates: KL stays at {kl:.3g} nats/token{held}, and reward "
            f"has not improved for {streak} points (beta={beta:.3g}).",
            evidence=facts,
            advice=STRONG_ADVICE,
        )

    def _binding(self, view: StepView, kl: float, stagnant: bool, clears: bool) -> Verdict | None:
        th = self.th
        binding = stagnant and kl >= th["small_kl"] and self._flat(view.step, kl)
        self.binding_streak = streak = self.binding_streak + 1 if binding else 0
        if streak < th["binding_persistence"]:
            key = "kl_binding"
            return CLEARED[key] if key in self.open_keys and clears else None
        before = self.history.ago(view.step, th["binding_lookback_steps"])
        if not view.emits(self.id, "kl_binding", "info"):
            return None
        return Verdict(
            "kl_binding",
            "info",
            message=f"KL is binding — consider a reference reset: KL has stayed at {kl:.3g} "
            f"nats/token while reward has not improved for {streak} points.",
            evidence={"kl": rounded(kl), "kl_lookback": rounded(before), **view.reward.evidence()},
            advice=STRONG_ADVICE[3:],
        )
