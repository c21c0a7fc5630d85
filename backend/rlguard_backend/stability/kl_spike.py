"""D4: one update moved the policy too far (DETECTORS.md §3 D4).

Alert keys: ``kl_spike`` (|ppo_kl| > max(10x running median, 0.5 kappa) WARN, > 1.5 kappa
CRITICAL; one level up when clip fraction falls at the same time), ``grad_spike`` (grad norm
> 10x its running median, WARN), ``logprob_mismatch`` (U == 1, where ppo_kl must be 0: any
|ppo_kl| > 1e-3, WARN). Single-step rules; each clears after 10 steps below its threshold.
Without U in the run config the ppo_kl rules run one level weaker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from rlguard_backend.stability.base import Detector, Stops, capped
from rlguard_backend.stability.columns import (
    NOT_QUIET,
    Bools,
    Columns,
    Floats,
    Quiet,
    counting,
    first,
    run_lengths,
)
from rlguard_backend.stability.context import RunContext
from rlguard_backend.stability.events import CLEARED, Severity, Verdict
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
    reads = frozenset({"grad_norm", "ppo_kl", "clipfrac"})

    def __init__(
        self, context: RunContext, thresholds: Thresholds, open_keys: set[str] | None = None
    ) -> None:
        super().__init__(context, thresholds, open_keys)
        size = int(thresholds["history_points"])
        self.ppo_kls = SortedWindow(size)
        self.grads = SortedWindow(size)
        self.clipfracs = Window(size)  # its median is needed on spikes only
        self.quiet = dict.fromkeys(self.keys, 0)
        self._kappa = context.ppo_kl_target or thresholds["default_ppo_kl_target"]
        # A |ppo_kl| at or below both budgets cannot spike (the warn threshold is never below
        # budget_warn x kappa): the usual step needs no median.
        self._warn_floor = thresholds["budget_warn"] * self._kappa
        self._critical_above = thresholds["budget_critical"] * self._kappa
        self._on_policy = context.updates_per_batch == 1

    @property
    def kappa(self) -> float:
        return self._kappa

    def missing(self, seen: frozenset[str]) -> str | None:
        if "ppo_kl" not in seen:
            return "no per-update KL logged (actor/ppo_kl): only the grad-norm rule runs"
        if self.context.updates_per_batch is None:
            return "no updates_per_batch (ppo_epochs) in run config: KL rules one level weaker"
        return None

    def evaluate(self, view: StepView) -> Sequence[Verdict | None]:
        finite = view.finite
        grad_spike = self._grad_spike(finite("grad_norm"))
        ppo_kl = finite("ppo_kl")
        kl_spike = None
        if ppo_kl is not None:
            size = abs(ppo_kl)
            kl_spike = self._mismatch(size) if self._on_policy else self._kl_spike(view, size)
            self.ppo_kls.push(size)
        clipfrac = finite("clipfrac")
        if clipfrac is not None:
            self.clipfracs.append(clipfrac)
        return grad_spike, kl_spike

    def quiet_prefix(self, cols: Columns) -> Quiet:
        th, n, counts = self.th, cols.n, self.quiet
        stops, moved = Stops(self, cols), {}  # moved: quiet count after each step, per key
        grads = cols.value("grad_norm")
        if grads is not None:
            if len(self.grads) < (self.grads.maxlen or 0):
                return NOT_QUIET  # the medians of a window still filling: left to feed()
            spiking = self._grad_spikes(grads)
            moved["grad_spike"] = run_lengths(~spiking, counts["grad_spike"])
            stops.cannot_tell(first(spiking))
        kls = cols.value("ppo_kl")
        sizes = None if kls is None else np.abs(kls)
        if sizes is not None:
            if self._on_policy:
                firing = sizes > th["on_policy_tolerance"]
                moved["logprob_mismatch"] = run_lengths(~firing, counts["logprob_mismatch"])
            else:  # past a budget a spike is possible: feed() decides from the medians
                firing = (sizes > self._warn_floor) | (sizes > self._critical_above)
                moved["kl_spike"] = counting(counts["kl_spike"], n)
            stops.cannot_tell(first(firing))
        for key, quiet in moved.items():
            stops.clears(key, quiet)
        clipfracs = cols.value("clipfrac")

        def advance(begin: int, end: int) -> None:
            if grads is not None:
                self.grads.push_all(grads[begin:end].tolist())
            if sizes is not None:
                self.ppo_kls.push_all(sizes[begin:end].tolist())
            if clipfracs is not None:
                self.clipfracs.extend(clipfracs[begin:end].tolist())
            for key, quiet in moved.items():
                counts[key] = int(quiet[end - 1])

        return stops.quiet(advance)

    def _grad_spikes(self, grads: Floats) -> Bools:
        """_grad_spike's verdict at each step, from a full window: spiking or not."""
        th, window = self.th, self.grads
        size = len(window)
        if size < th["min_history_points"]:
            return np.zeros(len(grads), dtype=np.bool_)
        history = np.concatenate((np.array(window, dtype=np.float64), grads))
        factor, low = th["grad_factor"], history.min()
        if factor > 0 < low and grads.max() <= factor * low:
            # Every window's median is at least its smallest value: no grad can spike.
            return np.zeros(len(grads), dtype=np.bool_)
        ordered = np.sort(sliding_window_view(history, size)[: len(grads)], axis=1)
        middle = size // 2  # SortedWindow.median of the window before each step's point
        typical = ordered[:, middle]
        if size % 2 == 0:
            typical = (ordered[:, middle - 1] + typical) / 2
        return (typical > 0) & (grads > factor * typical)

    def _severity(self, size: float) -> tuple[Severity | None, float | None]:
        """Severity of a per-update KL of `size` past the warn floor, and the typical one."""
        th, history = self.th, self.ppo_kls
        if size > self._critical_above:
            return "critical", history.median() if len(history) else None
        if not history or len(history) < th["min_history_points"]:
            return None, None
        typical = history.median()
        warn_at = max(th["median_factor"] * typical, self._warn_floor)
        return ("warn" if size > warn_at else None), typical

    def _kl_spike(self, view: StepView, size: float) -> Verdict | None:
        th = self.th
        severity, typical = None, None
        if size > self._warn_floor or size > self._critical_above:
            severity, typical = self._severity(size)
        # D6 escalates on an abrupt jump past the budget (×10 the last few points), not on a
        # ramp crossing it: D6's own c̄ > 0.2 rule covers ramps (§4 S7 wants CRITICAL ≥ 108).
        jump = False
        if severity == "critical":  # the median of the last points only when it matters
            recent = list(self.ppo_kls)[-RECENT_POINTS:]
            jump = bool(recent) and size > th["median_factor"] * median(recent)
        view.kl_spike_jump = jump  # D6 reads it later this step
        counts = self.quiet
        counts["kl_spike"] = quiet = counts["kl_spike"] + 1 if severity is None else 0
        if severity is None:
            key = "kl_spike"
            return CLEARED[key] if key in self.open_keys and quiet >= th["clear_steps"] else None
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
        return clipfrac < self.th["falling_clip_ratio"] * median(self.clipfracs)

    def _grad_spike(self, grad: float | None) -> Verdict | None:
        th = self.th
        if grad is None:
            return None
        grads = self.grads
        enough = len(grads) >= th["min_history_points"]
        typical = grads.median() if enough and len(grads) else 0.0  # used only when enough
        grads.push(grad)
        spiking = enough and typical > 0 and grad > th["grad_factor"] * typical
        counts = self.quiet
        counts["grad_spike"] = quiet = counts["grad_spike"] + 1 if not spiking else 0
        if not spiking:
            key = "grad_spike"
            return CLEARED[key] if key in self.open_keys and quiet >= th["clear_steps"] else None
        return Verdict(
            "grad_spike",
            "warn",
            message=f"Grad norm spiked to {grad:.3g} (×{grad / typical:.3g} its running median).",
            evidence={"grad_norm": rounded(grad), "typical_grad_norm": rounded(typical)},
            advice=SPIKE_ADVICE,
        )

    def _mismatch(self, size: float) -> Verdict | None:
        th = self.th
        off = size > th["on_policy_tolerance"]
        counts = self.quiet
        counts["logprob_mismatch"] = quiet = counts["logprob_mismatch"] + 1 if not off else 0
        if not off:
            key = "logprob_mismatch"
            return CLEARED[key] if key in self.open_keys and quiet >= th["clear_steps"] else None
        return Verdict(
            "logprob_mismatch",
            "warn",
            message=f"Log-prob mismatch on-policy: with one update per batch the ratio is 1 by "
            f"construction, yet |ppo_kl| = {size:.3g}.",
            evidence={"ppo_kl": rounded(size), "updates_per_batch": 1},
            advice=MISMATCH_ADVICE,
        )
