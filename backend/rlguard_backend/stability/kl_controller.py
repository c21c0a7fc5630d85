"""D7: the adaptive KL controller running away (DETECTORS.md §3 D7).

The Ziegler et al. controller (verl, old TRL, OpenRLHF): beta_next = beta * (1 + clip(KL/target -
1, -0.2, 0.2) * n / horizon); the maximum change per step is m = 0.2 n / horizon.
Alert keys: ``kl_controller`` (WARN when the error has sat at its clip for N_sat = ceil(ln 2 / m)
steps and beta moved x10, CRITICAL x100; evidence says "up" or "down"; clears after N_sat
unsaturated steps), ``kl_controller_units`` (WARN once at W+20 if median KL/target is > 5 or
< 0.2), ``kl_controller_replay`` (INFO: logged beta differs from the law by > 0.1 %).
Active when the run config says ``kl_controller: adaptive``, or says nothing and beta moves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rlguard_backend.stability.base import Detector, capped
from rlguard_backend.stability.context import RunContext
from rlguard_backend.stability.events import CLEARED, Severity, Verdict
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.primitives import Window, median, rounded
from rlguard_backend.stability.thresholds import Thresholds

UP_ADVICE = [
    "Raise the target or horizon only deliberately.",
    "Otherwise lower the LR and inspect samples for reward hacking.",
]
DOWN_ADVICE = [
    "Lower the target KL (or check it is per token, not per sequence): the KL term is off.",
]


class KlController(Detector):
    """D7: adaptive beta pinned at its maximum rate of change."""

    id = "kl_controller"
    keys = ("kl_controller", "kl_controller_units", "kl_controller_replay")
    reads = frozenset({"reward_kl_coef"})

    def __init__(
        self, context: RunContext, thresholds: Thresholds, open_keys: set[str] | None = None
    ) -> None:
        super().__init__(context, thresholds, open_keys)
        self.beta_start: float | None = None
        self.previous: list[float] | None = None  # [step, beta, kl]
        self.adaptive_seen = False
        self.largest_step_change = 0.0
        self.saturated_sign = 0
        self.saturated_streak = 0
        self.unsaturated_streak = 0
        self.units_checked = False
        self.ratios = Window(int(thresholds["units_points"]))
        self.replay_streak = 0
        self.replay_quiet = 0

    @property
    def target(self) -> float:
        return self.context.kl_target or self.th["default_target"]

    def missing(self, seen: frozenset[str]) -> str | None:
        if self.context.kl_controller == "fixed":
            return "fixed KL controller in run config: disabled"
        if "reward_kl_coef" not in seen:
            return "no in-reward beta logged (actor/reward_kl_penalty_coeff): disabled"
        notes = []
        if self.context.kl_target is None:
            notes.append(f"no kl_target in run config; using default {self.target}")
        if self._max_change() is None or not self._configured_rate():
            notes.append("no sequences_per_step/kl_horizon: max rate inferred from beta")
        return "; ".join(notes) or None

    def evaluate(self, view: StepView) -> Sequence[Verdict | None]:
        beta, kl = view.finite("reward_kl_coef"), self._controller_kl(view)
        if beta is None or kl is None or beta <= 0 or self.context.kl_controller == "fixed":
            return ()
        if self.beta_start is None:
            self.beta_start = beta
        replay = self._replay(view.step, beta)
        self.previous = [view.step, beta, kl]
        if not self.adaptive_seen:
            return ()
        error = kl / self.target - 1
        self.ratios.append(kl / self.target)
        return self._runaway(view, beta, kl, error), self._units(view), replay

    def _controller_kl(self, view: StepView) -> float | None:
        """The KL the controller sees: old TRL's per-sequence sum, else per-token in-reward KL."""
        return view.finite("kl_ref_seq") or view.finite("reward_kl_penalty")

    def _configured_rate(self) -> float | None:
        n, horizon = self.context.sequences_per_step, self.context.kl_horizon
        return self.th["error_clip"] * n / horizon if n and horizon else None

    def _max_change(self) -> float | None:
        """m: configured, else the largest per-step relative change of beta seen so far."""
        return self._configured_rate() or (self.largest_step_change or None)

    def _replay(self, step: int, beta: float) -> Verdict | None:
        if self.previous is None:
            return None
        previous_step, previous_beta, previous_kl = self.previous
        change = abs(beta / previous_beta - 1)
        if step == previous_step + 1:
            self.largest_step_change = max(self.largest_step_change, change)
        explicit = self.context.kl_controller == "adaptive"
        self.adaptive_seen = self.adaptive_seen or explicit or change > 1e-9
        rate = self._configured_rate()
        if rate is None or step != previous_step + 1 or not self.adaptive_seen:
            return None
        error = max(-1.0, min(1.0, (previous_kl / self.target - 1) / self.th["error_clip"]))
        predicted = previous_beta * (1 + error * rate)
        off = abs(predicted / beta - 1) > self.th["replay_tolerance"]
        self.replay_streak = streak = self.replay_streak + 1 if off else 0
        self.replay_quiet = quiet = self.replay_quiet + 1 if not off else 0
        if streak < self.th["replay_persistence"]:
            key = "kl_controller_replay"
            return CLEARED[key] if key in self.open_keys and quiet >= 10 else None
        return Verdict(
            "kl_controller_replay",
            "info",
            message=f"Logged beta {beta:.4g} differs from the controller law's {predicted:.4g}: "
            "controller params (n, horizon, target) differ from the assumed config.",
            evidence={"beta": beta, "predicted_beta": predicted, "target": self.target},
            advice=["Log the controller's n, horizon and target in the run config."],
        )

    def _runaway(self, view: StepView, beta: float, kl: float, error: float) -> Verdict | None:
        sign = 0 if abs(error) < self.th["error_clip"] else (1 if error > 0 else -1)
        if sign != self.saturated_sign:
            self.saturated_streak = 0
        self.saturated_sign = sign
        self.saturated_streak = saturated = self.saturated_streak + 1 if sign != 0 else 0
        self.unsaturated_streak = unsaturated = self.unsaturated_streak + 1 if sign == 0 else 0
        rate = self._max_change()
        needed = math.ceil(math.log(2) / rate) if rate else None
        if needed is None:
            return None
        assert self.beta_start is not None
        moved = math.log(beta / self.beta_start) * sign
        severity: Severity | None = None
        if saturated >= needed and moved >= math.log(self.th["critical_factor"]):
            severity = "critical"
        elif saturated >= needed and moved >= math.log(self.th["warn_factor"]):
            severity = "warn"
        if severity is None:
            key = "kl_controller"
            return CLEARED[key] if key in self.open_keys and unsaturated >= needed else None
        reported = capped(severity, self.context.kl_target is None)
        if not view.emits(self.id, "kl_controller", reported):
            return None
        return self._runaway_verdict(severity, beta, kl, saturated, needed)

    def _runaway_verdict(
        self, severity: Severity, beta: float, kl: float, saturated: int, needed: int
    ) -> Verdict:
        assert self.beta_start is not None
        factor = beta / self.beta_start
        facts: dict[str, Any] = {
            "direction": "up" if self.saturated_sign > 0 else "down",
            "beta_start": self.beta_start,
            "beta": rounded(beta),
            "beta_factor": rounded(factor),
            "kl": rounded(kl),
            "target": self.target,
            "saturated_steps": saturated,
            "saturation_steps_needed": needed,
        }
        if self.context.kl_target is None:
            facts["degraded"] = f"no kl_target in run config; using default {self.target}"
        if self._configured_rate() is None:
            facts["assumed"] = "no sequences_per_step/kl_horizon: max rate inferred from beta"
        if self.saturated_sign > 0:
            message = (
                f"beta has grown ×{factor:.3g} at the controller's maximum rate for {saturated} "
                f"steps, yet KL ({kl:.3g}) stays > 1.2× target ({self.target:.3g}): the penalty "
                "cannot hold the policy or the target is unattainable."
            )
        else:
            message = (
                f"beta has shrunk ×{factor:.3g} over {saturated} saturated steps; KL ({kl:.3g}) "
                f"is below target ({self.target:.3g}): the target is too high for this run (or "
                "in the wrong units); the KL term is effectively off."
            )
        return Verdict(
            "kl_controller",
            capped(severity, self.context.kl_target is None),
            message=message,
            evidence=facts,
            advice=UP_ADVICE if self.saturated_sign > 0 else DOWN_ADVICE,
        )

    def _units(self, view: StepView) -> Verdict | None:
        due = view.steps_since_start >= view.warmup_steps + self.th["units_delay_steps"]
        if self.units_checked or not due or not len(self.ratios):
            return None
        self.units_checked = True
        typical = median(self.ratios)
        if self.th["units_low"] <= typical <= self.th["units_high"]:
            return None
        return Verdict(
            "kl_controller_units",
            "warn",
            message=f"Median KL/target over the last points is {typical:.3g}: target and KL are "
            "likely in different units (per-sequence vs per-token).",
            evidence={"median_kl_over_target": rounded(typical), "target": self.target},
            advice=[
                "Per-sequence KL targets (old TRL: 6 nats) need per-sequence KL; divide "
                "sums by mean length or set a per-token target (verl default 0.1)."
            ],
        )
