"""D4: one update moved the policy too far (DETECTORS.md §3 D4).

Alert keys: ``kl_spike`` (|ppo_kl| > max(10x running median, 0.5 kappa) WARN, > 1.5 kappa
CRITICAL; one level up when clip fraction falls at the same time), ``grad_spike`` (grad norm
> 10x its running median, WARN), ``logprob_mismatch`` (U == 1, where ppo_kl must be 0: any
|ppo_kl| > 1e-3, WARN). Single-step rules; each clears after 10 steps below its threshold.
Without U in the run config the ppo_kl rules run one level weaker.
"""

from __future__ import annotations

from typing import Any

from rlguard_backend.stability.base import Detector, capped
from rlguard_backend.stability.context import RunContext
from rlguard_backend.stability.events import QUIET, Severity, Verdict
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.primitives import SortedWindow, Window, median, rounded
from rlguard_backend.stability.thresholds import Thresholds

SPIKE_ADVICE = [
    "Lower the learning rate.",
    "Fewer epochs or larger mini-batches (fewer updates per batch).",
    "Enable early stop at 1.5x target_kl (SB3 / Spinning Up rule).",
    "Check log-prob agreement between rollout and trainer (importance-sampling correction).",
    "If spikes repeat, roll back.",
]
RECENT_POINTS = 5
MISMATCH_ADVICE = [
    "With one update per batch the ratio must be exactly 1: check that rollout and trainer "
    "compute the same log-probs (dtype, kernels, vLLM vs trainer), or add an IS correction.",
]


class KlSpike(Detector):
    """D4: per-update KL and grad-norm spikes; on-policy log-prob mismatch."""

    id = "kl_spike"
    keys = ("kl_spike", "grad_spike", "logprob_mismatch")

    def __init__(self, context: RunContext, thresholds: Thresholds) -> None:
        super().__init__(context, thresholds)
        size = int(thresholds["history_points"])
        self.ppo_kls = SortedWindow(size)
        self.grads = SortedWindow(size)
        self.clipfracs = Window(size)  # its median is needed on spikes only
        self.quiet = dict.fromkeys(self.keys, 0)

    @property
    def kappa(self) -> float:
        return self.context.ppo_kl_target or self.th["default_ppo_kl_target"]

    def missing(self, seen: frozenset[str]) -> str | None:
        if "ppo_kl" not in seen:
            return "no per-update KL logged (actor/ppo_kl): only the grad-norm rule runs"
        if self.context.updates_per_batch is None:
            return "no updates_per_batch (ppo_epochs) in run config: KL rules one level weaker"
        return None

    def evaluate(self, view: StepView) -> list[Verdict]:
        verdicts = [self._grad_spike(view)]
        ppo_kl = view.finite("ppo_kl")
        if ppo_kl is not None:
            if self.context.updates_per_batch == 1:
                verdicts.append(self._mismatch(view, abs(ppo_kl)))
            else:
                verdicts.append(self._kl_spike(view, abs(ppo_kl)))
            self.ppo_kls.push(view.step, abs(ppo_kl))
        clipfrac = view.finite("clipfrac")
        if clipfrac is not None:
            self.clipfracs.push(view.step, clipfrac)
        return verdicts

    def _severity(self, size: float) -> tuple[Severity | None, float | None]:
        th = self.th
        typical = self.ppo_kls.median() if len(self.ppo_kls) else None
        if size > th["budget_critical"] * self.kappa:
            return "critical", typical
        if typical is None or len(self.ppo_kls) < th["min_history_points"]:
            return None, typical
        warn_at = max(th["median_factor"] * typical, th["budget_warn"] * self.kappa)
        return ("warn" if size > warn_at else None), typical

    def _kl_spike(self, view: StepView, size: float) -> Verdict:
        severity, typical = self._severity(size)
        # D6 escalates on an abrupt jump past the budget (×10 the last few points), not on a
        # ramp crossing it: D6's own c̄ > 0.2 rule covers ramps (§4 S7 wants CRITICAL ≥ 108).
        jump = False
        if severity == "critical":  # the median of the last points only when it matters
            recent = self.ppo_kls.values[-RECENT_POINTS:]
            jump = bool(recent) and size > self.th["median_factor"] * median(recent)
        view.findings["kl_spike_critical_jump"] = jump
        counts = self.quiet
        counts["kl_spike"] = quiet = counts["kl_spike"] + 1 if severity is None else 0
        if severity is None:
            return QUIET["kl_spike"][quiet >= self.th["clear_steps"]]
        clip_falling = self._clip_falling(view)
        if clip_falling:
            severity = "critical"
        unknown_u = self.context.updates_per_batch is None
        facts: dict[str, Any] = {
            "ppo_kl": rounded(size),
            "typical_ppo_kl": rounded(typical),
            "times_typical": rounded(size / typical) if typical else None,
            "ppo_kl_target": self.kappa,
            "clipfrac_falling": clip_falling,
            "grad_norm": rounded(view.finite("grad_norm")),
        }
        if unknown_u:
            facts["degraded"] = "no updates_per_batch in run config; severity lowered one level"
        if self.context.ppo_kl_target is None:
            facts["assumed"] = f"no ppo_kl_target in run config; using default {self.kappa}"
        times = f" (×{facts['times_typical']} the usual)" if typical else ""
        return Verdict(
            "kl_spike",
            capped(severity, unknown_u),
            message=f"One update moved the policy by KL={size:.3g}{times}"
            f"{' while the clip fraction fell' if clip_falling else ''}.",
            evidence=facts,
            advice=SPIKE_ADVICE,
        )

    def _clip_falling(self, view: StepView) -> bool:
        """Spike with a collapsing clip fraction: 'policy totally ruined' (baselines#456)."""
        clipfrac = view.finite("clipfrac")
        if clipfrac is None or len(self.clipfracs) < self.th["min_history_points"]:
            return False
        return clipfrac < self.th["falling_clip_ratio"] * median(self.clipfracs.values)

    def _grad_spike(self, view: StepView) -> Verdict:
        grad = view.finite("grad_norm")
        if grad is None:
            return QUIET["grad_spike"][False]
        typical = self.grads.median() if len(self.grads) else 0.0
        enough = len(self.grads) >= self.th["min_history_points"]
        self.grads.push(view.step, grad)
        spiking = enough and typical > 0 and grad > self.th["grad_factor"] * typical
        counts = self.quiet
        counts["grad_spike"] = quiet = counts["grad_spike"] + 1 if not spiking else 0
        if not spiking:
            return QUIET["grad_spike"][quiet >= self.th["clear_steps"]]
        return Verdict(
            "grad_spike",
            "warn",
            message=f"Grad norm spiked to {grad:.3g} (×{grad / typical:.3g} its running median).",
            evidence={"grad_norm": rounded(grad), "typical_grad_norm": rounded(typical)},
            advice=SPIKE_ADVICE,
        )

    def _mismatch(self, view: StepView, size: float) -> Verdict:
        off = size > self.th["on_policy_tolerance"]
        counts = self.quiet
        counts["logprob_mismatch"] = quiet = counts["logprob_mismatch"] + 1 if not off else 0
        if not off:
            return QUIET["logprob_mismatch"][quiet >= self.th["clear_steps"]]
        return Verdict(
            "logprob_mismatch",
            "warn",
            message=f"Log-prob mismatch on-policy: with one update per batch the ratio is 1 by "
            f"construction, yet |ppo_kl| = {size:.3g}.",
            evidence={"ppo_kl": rounded(size), "updates_per_batch": 1},
            advice=MISMATCH_ADVICE,
        )
