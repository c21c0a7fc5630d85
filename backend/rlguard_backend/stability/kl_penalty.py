"""D5 (DETECTORS.md §3): a KL penalty too strong, or binding, while reward stagnates."""

from __future__ import annotations

from rlguard_backend.stability.events import Severity, capped
from rlguard_backend.stability.kl_reference import current_beta, penalty_share
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.primitives import Lookback, rounded
from rlguard_backend.stability.rules import Detector, Facts, Rule

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
    reads = frozenset({"kl_loss", "reward_kl_penalty", "kl_ref_seq"})  # kl_ref comes from these

    def start(self) -> None:
        self.history = Lookback(int(self.thresholds["binding_lookback_steps"]))
        self._kl, self._beta = 0.0, 0.0  # this step's smoothed KL and beta
        self._share: float | None = None  # this step's penalty share (in-reward KL)
        self._stagnant = False

    def missing(self, seen: frozenset[str]) -> str | None:
        if not seen & {"kl_coef", "reward_kl_coef"} and self.context.kl_coef is None:
            return "no KL coefficient logged or in run config (kl_coef): disabled"
        if "reward_mean" not in seen:
            return "no reward logged: disabled"
        return None

    def observe(self, view: StepView) -> bool:
        kl = view.smoothed["kl_ref"]
        beta = current_beta(view, self.context)
        if view.finite("kl_ref") is None or kl is None or not beta or beta <= 0:
            return False
        self.history.push(view.step, kl)
        active = view.steps_since_start >= self.thresholds["min_step"] and view.reward.known
        self._stagnant = active and view.reward.stagnant
        self._kl, self._beta, self._share = kl, beta, None
        if self.context.kl_placement == "reward":
            self._share = penalty_share(view, beta)
        return True

    def _dominant(self) -> bool:
        return self._share is not None and self._share >= self.thresholds["strong_share"]

    def _strong(self, view: StepView) -> Severity | None:
        th, rho = self.thresholds, view.rho
        unmoved = self._kl < th["small_kl"] and (rho is None or rho > th["unmoved_entropy_ratio"])
        dominant = self._dominant()
        if not (self._stagnant and (unmoved or dominant)):
            return None
        return capped("warn", rho is None and not dominant)

    def _describe_strong(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        kl, beta, rho = self._kl, self._beta, view.rho
        streak = self.progress["kl_penalty_strong"].streak
        facts: Facts = {
            "kl": rounded(kl),
            "beta": beta,
            "entropy_ratio": rounded(rho),
            "penalty_share": rounded(self._share),
            "stagnant_points": streak,
            **view.reward.evidence(),
        }
        if rho is None:
            facts["degraded"] = "no entropy logged: 'policy not moving' judged from KL alone"
        held = f" and entropy is still at {rho:.0%} of its start" if rho is not None else ""
        message = (
            f"KL penalty dominates: KL stays at {kl:.3g} nats/token{held}, and reward "
            f"has not improved for {streak} points (beta={beta:.3g})."
        )
        return message, facts

    def _binding(self, view: StepView) -> Severity | None:
        th, kl = self.thresholds, self._kl
        before = self.history.ago(view.step, th["binding_lookback_steps"])
        flat = before is not None and before > 0 and abs(kl / before - 1) < th["binding_flatness"]
        return "info" if self._stagnant and kl >= th["small_kl"] and flat else None

    def _describe_binding(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        kl, streak = self._kl, self.progress["kl_binding"].streak
        before = self.history.ago(view.step, self.thresholds["binding_lookback_steps"])
        message = (
            f"KL is binding — consider a reference reset: KL has stayed at {kl:.3g} "
            f"nats/token while reward has not improved for {streak} points."
        )
        return message, {
            "kl": rounded(kl),
            "kl_lookback": rounded(before),
            **view.reward.evidence(),
        }

    rules = (
        Rule(
            "kl_penalty_strong",
            signals=("kl_ref", "kl_coef", "reward_kl_coef", "reward_mean", "entropy"),
            fires=_strong,
            persistence="persistence",
            clears=lambda d, v: v.reward.improving,
            describe=_describe_strong,
            advice=STRONG_ADVICE,
        ),
        Rule(
            "kl_binding",
            signals=("kl_ref", "kl_coef", "reward_kl_coef", "reward_mean"),
            fires=_binding,
            persistence="binding_persistence",
            clears=lambda d, v: v.reward.improving,
            describe=_describe_binding,
            advice=STRONG_ADVICE[3:],
        ),
    )
