"""D7 (DETECTORS.md §3): the adaptive KL controller running away.

The Ziegler et al. controller (verl, old TRL, OpenRLHF): beta_next = beta * (1 + clip(KL/target -
1, -0.2, 0.2) * n / horizon); the maximum change per step is m = 0.2 n / horizon. Active when the
run config says ``kl_controller: adaptive``, or says nothing and beta moves.
"""

from __future__ import annotations

import math
from typing import ClassVar

from rlguard_backend.stability.events import Severity, capped
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.primitives import Window, median, rounded, times
from rlguard_backend.stability.rules import NEVER, Detector, Facts, Need, Rule

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
    reads = Need(
        frozenset({"reward_kl_coef"}),
        "no in-reward beta logged (actor/reward_kl_penalty_coeff): disabled",
    )

    def start(self) -> None:
        """The controller's start beta, previous point, saturation streaks and units check."""
        self.beta_start: float | None = None
        self.previous: list[float] | None = None  # [step, beta, kl]
        self.adaptive_seen = False
        self.largest_step_change = 0.0
        self.saturated_sign = 0  # the sign of the error while it sits at its clip, else 0
        self.saturated_streak = 0
        self.unsaturated_streak = 0
        self.units_checked = False
        self.ratios = Window(int(self.thresholds["units_points"]))
        self._target = self.context.kl_target or self.thresholds["default_target"]
        # This step's facts.
        self._beta, self._kl = 0.0, 0.0
        self._needed: int | None = None  # N_sat, once the maximum rate is known
        self._predicted: float | None = None  # beta by the controller law (replay), if checked
        self._units_ratio: float | None = None  # median KL/target, the step it is checked

    def missing(self, seen: frozenset[str]) -> str | None:
        """Disabled for a fixed controller or without beta; notes the assumed target or rate."""
        if self.context.kl_controller == "fixed":
            return "fixed KL controller in run config: disabled"
        return super().missing(seen) or "; ".join(self._assumptions().values()) or None

    def _assumptions(self) -> Facts:
        """What the run config left unset, and what is used instead."""
        facts: Facts = {}
        if self.context.kl_target is None:
            facts["degraded"] = f"no kl_target in run config; using default {self._target}"
        if self._configured_rate() is None:
            facts["assumed"] = "no sequences_per_step/kl_horizon: max rate inferred from beta"
        return facts

    def observe(self, view: StepView) -> bool:
        """Replay the controller law and count saturation; False until beta is seen to adapt."""
        # The KL the controller sees: old TRL's per-sequence sum, else per-token in-reward KL.
        beta = view.finite("reward_kl_coef")
        kl = view.finite("kl_ref_seq") or view.finite("reward_kl_penalty")
        if beta is None or kl is None or beta <= 0 or self.context.kl_controller == "fixed":
            return False
        if self.beta_start is None:
            self.beta_start = beta
        self._predicted = self._replay(view.step, beta)
        self.previous = [view.step, beta, kl]
        if not self.adaptive_seen:
            return False
        self._beta, self._kl = beta, kl
        self.ratios.append(kl / self._target)
        self._observe_saturation(kl / self._target - 1)
        self._units_ratio = self._units_check(view)
        return True

    def _configured_rate(self) -> float | None:
        n, horizon = self.context.sequences_per_step, self.context.kl_horizon
        return self.thresholds["error_clip"] * n / horizon if n and horizon else None

    def _replay(self, step: int, beta: float) -> float | None:
        """beta as the controller law predicts it from the previous step, when checkable."""
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
        clip = self.thresholds["error_clip"]
        error = max(-1.0, min(1.0, (previous_kl / self._target - 1) / clip))
        return previous_beta * (1 + error * rate)

    def _observe_saturation(self, error: float) -> None:
        sign = 0 if abs(error) < self.thresholds["error_clip"] else (1 if error > 0 else -1)
        if sign != self.saturated_sign:
            self.saturated_streak = 0
        self.saturated_sign = sign
        self.saturated_streak = self.saturated_streak + 1 if sign != 0 else 0
        self.unsaturated_streak = self.unsaturated_streak + 1 if sign == 0 else 0
        # m: configured, else the largest per-step relative change of beta seen so far.
        rate = self._configured_rate() or self.largest_step_change
        self._needed = math.ceil(math.log(2) / rate) if rate else None

    def _units_check(self, view: StepView) -> float | None:
        """Median KL/target, once, at W + units_delay_steps."""
        due = view.steps_since_start >= view.warmup_steps + self.thresholds["units_delay_steps"]
        if self.units_checked or not due or not len(self.ratios):
            return None
        self.units_checked = True
        return median(self.ratios)

    def _runaway(self, view: StepView) -> Severity | None:
        assert self.beta_start is not None and self._needed is not None
        thresholds = self.thresholds
        if self.saturated_streak < self._needed:
            return None
        moved = math.log(self._beta / self.beta_start) * self.saturated_sign
        severity: Severity | None = None
        if moved >= math.log(thresholds["critical_factor"]):
            severity = "critical"
        elif moved >= math.log(thresholds["warn_factor"]):
            severity = "warn"
        return capped(severity, self.context.kl_target is None)

    def _settled(self, view: StepView) -> bool:
        """Unsaturated for as many steps in a row as saturation takes to count."""
        return self._needed is not None and self.unsaturated_streak >= self._needed

    def _describe_runaway(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        assert self.beta_start is not None
        beta, kl, saturated = self._beta, self._kl, self.saturated_streak
        factor = beta / self.beta_start
        facts: Facts = {
            "direction": "up" if self.saturated_sign > 0 else "down",
            "beta_start": self.beta_start,
            "beta": rounded(beta),
            "beta_factor": rounded(factor),
            "kl": rounded(kl),
            "target": self._target,
            "saturated_steps": saturated,
            "saturation_steps_needed": self._needed,
            **self._assumptions(),
        }
        if self.saturated_sign > 0:
            message = (
                f"beta has grown {times(factor)} at the controller's maximum rate for {saturated} "
                f"steps, yet KL ({kl:.3g}) stays > 1.2× target ({self._target:.3g}): the penalty "
                "cannot hold the policy or the target is unattainable."
            )
        else:
            message = (
                f"beta has shrunk to {times(factor)} its start over {saturated} saturated steps; "
                f"KL ({kl:.3g}) is below target ({self._target:.3g}): the target is too high for "
                "this run (or in the wrong units); the KL term is effectively off."
            )
        return message, facts

    def _units(self, view: StepView) -> Severity | None:
        ratio, thresholds = self._units_ratio, self.thresholds
        off = ratio is not None and not thresholds["units_low"] <= ratio <= thresholds["units_high"]
        return "warn" if off else None

    def _describe_units(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        message = (
            f"Median KL/target over the last points is {self._units_ratio:.3g}: target and KL "
            "are likely in different units (per-sequence vs per-token)."
        )
        return message, {
            "median_kl_over_target": rounded(self._units_ratio),
            "target": self._target,
        }

    def _replay_off(self, view: StepView) -> Severity | None:
        off = abs((self._predicted or 0.0) / self._beta - 1) > self.thresholds["replay_tolerance"]
        return "info" if off else None

    def _describe_replay(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        beta, predicted = self._beta, self._predicted
        message = (
            f"Logged beta {beta:.4g} differs from the controller law's {predicted:.4g}: "
            "controller params (n, horizon, target) differ from the assumed config."
        )
        return message, {"beta": beta, "predicted_beta": predicted, "target": self._target}

    rules: ClassVar[tuple[Rule[KlController], ...]] = (
        Rule(
            "kl_controller",
            signals=("reward_kl_coef", "reward_kl_penalty", "kl_ref_seq"),
            fires=_runaway,
            clears=(_settled,),
            clear_steps=1,  # the clear rule counts N_sat steps itself
            describe=_describe_runaway,
            advice=lambda d, severity: UP_ADVICE if d.saturated_sign > 0 else DOWN_ADVICE,
            applies=lambda d, v: d._needed is not None,
        ),
        Rule(
            "kl_controller_units",
            signals=("reward_kl_penalty", "kl_ref_seq"),
            fires=_units,
            clears=NEVER,
            clear_steps=1,
            describe=_describe_units,
            advice=[
                "Per-sequence KL targets (old TRL: 6 nats) need per-sequence KL; divide "
                "sums by mean length or set a per-token target (verl default 0.1)."
            ],
        ),
        Rule(
            "kl_controller_replay",
            signals=("reward_kl_coef",),
            fires=_replay_off,
            persistence="replay_persistence",
            clear_steps=10,
            describe=_describe_replay,
            advice=["Log the controller's n, horizon and target in the run config."],
            applies=lambda d, v: d._predicted is not None,
        ),
    )
