"""D1: NaN / Inf in training statistics, and values pinned at an internal clamp.

Alert keys: ``nonfinite`` (CRITICAL; WARN for a single non-finite grad norm, escalating when a
second one follows), ``pinned_at_clamp`` (WARN), ``negative_kl`` (WARN, old TRL sequence KL
< -1), ``truncated_at_floor`` (WARN: all responses truncated while reward sits at its floor).
No warmup, no persistence. Each clears after ``clear_steps`` (10) steps without its condition.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from rlguard_backend.stability.base import Detector, Stops
from rlguard_backend.stability.columns import NOT_QUIET, Columns, Quiet, first
from rlguard_backend.stability.context import RunContext
from rlguard_backend.stability.events import CLEARED, Severity, Verdict
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.primitives import is_finite, json_float, rounded
from rlguard_backend.stability.thresholds import Thresholds

# A non-finite value in any of these means the parameters are probably corrupted.
WATCHED_SIGNALS = (
    "pg_loss",
    "kl_loss",
    "reward_kl_penalty",
    "kl_ref_seq",
    "entropy",
    "ppo_kl",
    "reward_mean",
    "kl_coef",
    "reward_kl_coef",
)

ADVICE_NONFINITE = [
    "Stop and resume from the last checkpoint before the first non-finite step.",
    "Check bf16/fp16 overflow and the learning rate.",
    "Check log-prob recomputation (NaN old_log_prob caused verl#721).",
    "Check for degenerate batches where every response hits the max length.",
]


class NonFinite(Detector):
    """D1: non-finite statistics (CRITICAL), a skipped update or a pinned clamp (WARN)."""

    id = "nonfinite"
    keys = ("nonfinite", "pinned_at_clamp", "negative_kl", "truncated_at_floor")
    PRIMARY: ClassVar[tuple[str, str]] = ("nonfinite", "nonfinite")

    def __init__(
        self, context: RunContext, thresholds: Thresholds, open_keys: set[str] | None = None
    ) -> None:
        super().__init__(context, thresholds, open_keys)
        self.bad_grad_steps: list[int] = []
        self.quiet = dict.fromkeys(self.keys, 0)

    def evaluate(self, view: StepView) -> Sequence[Verdict | None]:
        # All four rules have one shape: fire on their facts at once, clear after clear_steps
        # steps without. The facts helpers return None at once when their signals are absent.
        facts = (
            self._nonfinite_fields(view) if not view.all_finite or self.bad_grad_steps else None,
            self._pinned(view),
            self._negative_sequence_kl(view),
            self._truncated_at_floor(view),
        )
        if not any(facts) and not self.open_keys:  # the usual step: one more quiet step each
            quiet = self.quiet
            for key in self.keys:
                quiet[key] += 1
            return ()
        return [self._track(key, found, view) for key, found in zip(self.keys, facts, strict=True)]

    def quiet_prefix(self, cols: Columns) -> Quiet:
        if self.bad_grad_steps:  # trimmed step by step: left to feed()
            return NOT_QUIET
        th = self.th
        facts = np.zeros(cols.n, dtype=np.bool_)  # steps where a rule has facts: it fires
        kl_loss, ppo_kl = cols.value("kl_loss"), cols.value("ppo_kl")
        if kl_loss is not None:
            facts |= kl_loss >= th["kl_loss_clamp"]
        if ppo_kl is not None:
            facts |= np.abs(ppo_kl) >= th["ppo_kl_clamp"]
        sequence_kl = cols.value("kl_ref_seq")
        if sequence_kl is not None:
            facts |= sequence_kl < th["sequence_kl_negative"]
        truncated, reward = cols.value("response_clip_ratio"), cols.value("reward_mean")
        if truncated is not None and reward is not None:
            floor = cols.r_min + th["floor_margin"] * (cols.r_max - cols.r_min)
            facts |= (truncated >= th["truncation_at_floor"]) & (reward <= floor)
        stops = Stops(self, cols)
        stops.cannot_tell(first(facts))
        for key in self.keys:
            stops.clears(key, self.quiet[key])

        def advance(begin: int, end: int) -> None:
            for key in self.keys:
                self.quiet[key] += end - begin

        return stops.quiet(advance)

    def missing(self, seen: frozenset[str]) -> str | None:
        if not seen & {*WATCHED_SIGNALS, "grad_norm"}:
            return "none of the watched statistics (losses, KL, entropy, reward, grad norm) logged"
        return None

    def _track(self, key: str, facts: dict[str, Any] | None, view: StepView) -> Verdict | None:
        """One rule's step: fire on its facts, or count one more step without them."""
        th, quiet = self.th, self.quiet
        if not facts:
            quiet[key] = count = quiet[key] + 1
            return CLEARED[key] if key in self.open_keys and count >= th["clear_steps"] else None
        quiet[key] = 0
        return self._nonfinite(view, facts) if key == "nonfinite" else self._warn(key, facts, view)

    def _nonfinite(self, view: StepView, bad: dict[str, float | str]) -> Verdict | None:
        grad_only = list(bad) == [view.sources.get("grad_norm")]
        repeated = len(self.bad_grad_steps) >= self.th["grad_critical_count"]
        severity: Severity = "warn" if grad_only and not repeated else "critical"
        if not view.emits(self.id, "nonfinite", severity):
            return None
        return Verdict(
            "nonfinite",
            severity,
            message=_nonfinite_message(view.step, bad, severity),
            evidence={"fields": bad, "non_finite_grad_steps": list(self.bad_grad_steps)},
            advice=ADVICE_NONFINITE,
        )

    def _nonfinite_fields(self, view: StepView) -> dict[str, float | str]:
        """Raw key -> JSON-safe value of every non-finite watched field (grad norm included)."""
        if view.all_finite:
            if self.bad_grad_steps:
                window = self.th["grad_window_steps"]
                self.bad_grad_steps = [s for s in self.bad_grad_steps if s > view.step - window]
            return {}
        bad: dict[str, float | str] = {
            view.sources[name]: json_float(view.values[name])
            for name in WATCHED_SIGNALS
            if name in view.values and not is_finite(view.values[name])
        }
        window = self.th["grad_window_steps"]
        self.bad_grad_steps = [s for s in self.bad_grad_steps if s > view.step - window]
        grad = view.values.get("grad_norm")
        if grad is not None and not is_finite(grad):
            self.bad_grad_steps.append(view.step)
            bad[view.sources["grad_norm"]] = json_float(grad)
        return bad

    def _pinned(self, view: StepView) -> dict[str, float] | None:
        pinned = {}
        kl_loss, ppo_kl = view.finite("kl_loss"), view.finite("ppo_kl")
        if kl_loss is not None and kl_loss >= self.th["kl_loss_clamp"]:
            pinned[view.sources["kl_loss"]] = kl_loss
        if ppo_kl is not None and abs(ppo_kl) >= self.th["ppo_kl_clamp"]:
            pinned[view.sources["ppo_kl"]] = ppo_kl
        return pinned or None

    def _negative_sequence_kl(self, view: StepView) -> dict[str, float] | None:
        kl = view.finite("kl_ref_seq")
        if kl is None or kl >= self.th["sequence_kl_negative"]:
            return None
        return {view.sources["kl_ref_seq"]: kl}

    def _truncated_at_floor(self, view: StepView) -> dict[str, float] | None:
        truncated, reward = view.finite("response_clip_ratio"), view.finite("reward_mean")
        if truncated is None or reward is None or truncated < self.th["truncation_at_floor"]:
            return None
        floor = view.reward.r_min + self.th["floor_margin"] * view.reward.range
        if reward > floor:
            return None
        return {"truncated_fraction": truncated, "reward": reward, "reward_floor": floor}

    def _warn(self, key: str, facts: dict[str, float], view: StepView) -> Verdict | None:
        if not view.emits(self.id, key, "warn"):
            return None
        evidence = {name: rounded(value) for name, value in facts.items()}
        message = _WARN_MESSAGES[key].format(step=view.step, facts=evidence)
        return Verdict(key, "warn", message=message, evidence=evidence, advice=_WARN_ADVICE[key])


def _nonfinite_message(step: int, bad: dict[str, float | str], severity: Severity) -> str:
    fields = ", ".join(f"{name}={value}" for name, value in sorted(bad.items()))
    if severity == "warn":
        return (
            f"Non-finite grad norm at step {step} ({fields}): the optimizer step was probably "
            "skipped (verl zeroes such gradients). Watch for repeats: two in 10 steps is critical."
        )
    return (
        f"Non-finite training statistics at step {step} ({fields}). Parameters are probably "
        f"corrupted from this step on. Stop and resume from the last checkpoint before {step}."
    )


_WARN_MESSAGES = {
    "pinned_at_clamp": "Values pinned at an internal clamp at step {step} ({facts}): the k3 "
    "per-token clamp is 10 and the log-ratio clamp 20, so the true values are larger.",
    "negative_kl": "Sequence KL to the reference is below -1 at step {step} ({facts}); old "
    "TRL warned this 'might be a precursor for failed training'.",
    "truncated_at_floor": "Almost every response is truncated while reward sits at its floor "
    "at step {step} ({facts}): a degenerate batch, often right before NaNs (Agent-R1#30).",
}
_WARN_ADVICE = {
    "pinned_at_clamp": ["Lower the learning rate; check rollout/trainer log-prob agreement."],
    "negative_kl": ["Check generation settings (sampling must match the trainer's policy)."],
    "truncated_at_floor": [
        "Inspect samples for repetition or gibberish.",
        "Prepare to roll back; check for NaNs in the following steps.",
    ],
}
