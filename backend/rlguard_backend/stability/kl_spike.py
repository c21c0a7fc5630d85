"""D4 (DETECTORS.md §3): an update moved the policy too far; grad spikes; on-policy log-prob gap."""

from __future__ import annotations

from typing import ClassVar

from rlguard_backend.stability.events import Severity, capped
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.primitives import SortedWindow, Window, median, rounded, times
from rlguard_backend.stability.rules import Detector, Facts, Need, Rule

SPIKE_ADVICE = [
    "Lower the learning rate.",
    "Fewer epochs or larger mini-batches (fewer updates per batch).",
    "Enable early stop at 1.5x target_kl (SB3 / Spinning Up rule).",
    "Check log-prob agreement between rollout and trainer (importance-sampling correction).",
    "If spikes repeat, roll back.",
]
MISMATCH_ADVICE = [
    "With one update per batch the ratio must be exactly 1: check that rollout and trainer "
    "compute the same log-probs (dtype, kernels, vLLM vs trainer), or add an IS correction.",
]


class KlSpike(Detector):
    """D4: per-update KL and grad-norm spikes; on-policy log-prob mismatch."""

    id = "kl_spike"
    reads = Need(
        frozenset({"grad_norm", "ppo_kl", "clipfrac"}),
        "no grad norm or per-update KL logged (actor/grad_norm, actor/ppo_kl): disabled",
    )

    def start(self) -> None:
        """The windows of |ppo_kl|, grad norms and clip fractions, and the KL budget."""
        size = int(self.thresholds["history_points"])
        self.ppo_kls = Window(size)  # its median is needed on large |ppo_kl| only
        self.grads = SortedWindow(size)  # its median is needed every step
        self.clipfracs = Window(size)  # its median is needed on spikes only
        self._kappa = self.context.ppo_kl_target or self.thresholds["default_ppo_kl_target"]
        # A |ppo_kl| at or below both budgets cannot spike (the warn threshold is never below
        # budget_warn x kappa): the usual step needs no median (observe stops there).
        self._warn_floor = self.thresholds["budget_warn"] * self._kappa
        self._critical_above = self.thresholds["budget_critical"] * self._kappa
        self._on_policy = self.context.updates_per_batch == 1
        # This step's facts, each judged against the windows before the step's own point.
        self._grad_typical: float | None = None  # set when the grad norm spikes
        self.grad_spike_steps = Window(int(self.thresholds["grad_repeat"]))  # the last few
        self._grad_spikes = 0  # spikes in the last history_points steps, this one included
        self._size: float | None = None  # |ppo_kl|
        self._spike: Severity | None = None
        self._typical: float | None = None
        self._clip_falling = False

    needs = (
        Need(
            frozenset({"ppo_kl"}),
            "no per-update KL logged (actor/ppo_kl): only the grad-norm rule runs",
        ),
    )
    needs_context = (
        (
            "updates_per_batch",
            "no updates_per_batch (ppo_epochs) in run config: KL rules one level weaker",
        ),
    )

    def observe(self, view: StepView) -> bool:
        """Judge this step's grad norm and |ppo_kl| against the windows, then add them."""
        self._observe_grad(view.step, view.finite("grad_norm"))
        self._spike = None
        ppo_kl = view.finite("ppo_kl")
        size = self._size = None if ppo_kl is None else abs(ppo_kl)
        if size is not None:
            # Below both budgets no update can spike: the usual step stops here.
            if not self._on_policy and (size > self._warn_floor or size > self._critical_above):
                self._observe_spike(view, size)
            self.ppo_kls.append(size)
        clipfrac = view.finite("clipfrac")
        if clipfrac is not None:
            self.clipfracs.append(clipfrac)
        return True

    def _observe_grad(self, step: int, grad: float | None) -> None:
        self._grad_typical = None
        if grad is None:
            return
        thresholds, grads = self.thresholds, self.grads
        enough = len(grads) >= thresholds["min_history_points"]
        typical = grads.median() if enough and len(grads) else 0.0
        grads.push(grad)
        if enough and typical > 0 and grad > thresholds["grad_factor"] * typical:
            self._grad_typical = typical
            self.grad_spike_steps.append(step)
            since = step - thresholds["history_points"]
            self._grad_spikes = sum(1 for spiked in self.grad_spike_steps if spiked > since)

    def _grad_severity(self, view: StepView) -> Severity | None:
        """A lone grad-norm spike is INFO: clipping bounds the update and healthy runs show
        them (verl's GSM8K PPO baselines, x18-31 once). It is WARN when it repeats, or when the
        same update's KL spiked too (the policy did move)."""
        if self._grad_typical is None:
            return None
        repeated = self._grad_spikes >= self.thresholds["grad_repeat"]
        return "warn" if repeated or self._spike is not None else "info"

    def _observe_spike(self, view: StepView, size: float) -> None:
        severity, typical = self._severity(size)
        self._clip_falling = severity is not None and self._clip_falls(view)
        if self._clip_falling:
            severity = "critical"
        degraded = self.context.updates_per_batch is None  # severity one level weaker
        self._spike, self._typical = capped(severity, degraded), typical

    def _severity(self, size: float) -> tuple[Severity | None, float | None]:
        """Severity of a per-update KL of `size` past the warn floor, and the typical one."""
        thresholds, history = self.thresholds, self.ppo_kls
        if size > self._critical_above:
            return "critical", median(history) if len(history) else None
        if not history or len(history) < thresholds["min_history_points"]:
            return None, None
        typical = median(history)
        warn_at = max(thresholds["median_factor"] * typical, self._warn_floor)
        return ("warn" if size > warn_at else None), typical

    def _clip_falls(self, view: StepView) -> bool:
        """Spike with a collapsing clip fraction: 'policy totally ruined' (baselines#456)."""
        clipfrac = view.finite("clipfrac")
        if clipfrac is None or len(self.clipfracs) < self.thresholds["min_history_points"]:
            return False
        return clipfrac < self.thresholds["falling_clip_ratio"] * median(self.clipfracs)

    def _describe_grad(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        grad, typical = view.finite("grad_norm") or 0.0, self._grad_typical or 1.0
        window, spikes = int(self.thresholds["history_points"]), self._grad_spikes
        message = f"Grad norm spiked to {grad:.3g} ({times(grad / typical)} its running median)"
        if spikes > 1:
            message += f", {spikes} such spikes in the last {window} steps."
        elif self._spike is not None:
            message += ", in the same update as a KL spike."
        else:
            message += "; once, with KL steady: gradient clipping bounds such an update."
        facts: Facts = {
            "grad_norm": rounded(grad),
            "typical_grad_norm": rounded(typical),
            "spikes_in_window": spikes,
        }
        return message, facts

    def _describe_spike(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        size, typical = self._size or 0.0, self._typical
        facts: Facts = {
            "ppo_kl": rounded(size),
            "typical_ppo_kl": rounded(typical),
            "times_typical": rounded(size / typical) if typical else None,
            "ppo_kl_target": self._kappa,
            "clipfrac_falling": self._clip_falling,
            "grad_norm": rounded(view.finite("grad_norm")),
        }
        if self.context.updates_per_batch is None:
            facts["degraded"] = "no updates_per_batch in run config; severity lowered one level"
        if self.context.ppo_kl_target is None:
            facts["assumed"] = f"no ppo_kl_target in run config; using default {self._kappa}"
        usual = f" ({times(size / typical)} its usual level)" if typical else ""
        falling = " while the clip fraction fell" if self._clip_falling else ""
        return f"One update moved the policy by KL={size:.3g}{usual}{falling}.", facts

    def _mismatch(self, view: StepView) -> Severity | None:
        """On-policy, any |ppo_kl| past the tolerance is a log-prob mismatch."""
        size, tolerance = self._size, self.thresholds["on_policy_tolerance"]
        return "warn" if size is not None and size > tolerance else None

    def _describe_mismatch(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        message = (
            "Log-prob mismatch on-policy: with one update per batch the ratio is 1 by "
            f"construction, yet |ppo_kl| = {self._size:.3g}."
        )
        return message, {"ppo_kl": rounded(self._size), "updates_per_batch": 1}

    rules: ClassVar[tuple[Rule[KlSpike], ...]] = (
        Rule(
            "grad_spike",
            signals=("grad_norm",),
            fires=_grad_severity,
            describe=_describe_grad,
            advice=SPIKE_ADVICE,
            applies=lambda d, v: v.finite("grad_norm") is not None,
        ),
        Rule(
            "kl_spike",
            signals=("ppo_kl", "clipfrac"),
            fires=lambda d, v: d._spike,
            describe=_describe_spike,
            advice=SPIKE_ADVICE,
            applies=lambda d, v: d._size is not None,
            enabled=lambda d: not d._on_policy,
        ),
        Rule(
            "logprob_mismatch",
            signals=("ppo_kl",),
            fires=_mismatch,
            describe=_describe_mismatch,
            advice=MISMATCH_ADVICE,
            applies=lambda d, v: d._size is not None,
            enabled=lambda d: d._on_policy,
        ),
    )
