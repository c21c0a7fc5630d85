"""D1 (DETECTORS.md §3): NaN / Inf in training statistics, and values pinned at a clamp."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from rlguard.protocol import to_wire
from rlguard_backend.stability.events import Severity
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.primitives import is_finite, rounded
from rlguard_backend.stability.rules import Detector, Facts, Need, Rule

# A non-finite value in any of these but the reward means the parameters are probably corrupted.
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

# A non-finite reward with every other statistic finite: the reward function made it.
ADVICE_REWARD_BUG = [
    "Check the reward function for a division by zero (e.g. normalising by a zero std or "
    "length) and for NaN from parsing answers (float('nan'), empty matches).",
    "Skip or clip non-finite rewards before computing advantages: a NaN advantage corrupts "
    "the next update.",
]

ADVICE_NONFINITE = [
    "Stop and resume from the last checkpoint before the first non-finite step.",
    "Check bf16/fp16 overflow and the learning rate.",
    "Check log-prob recomputation (a NaN old_log_prob caused "
    "https://github.com/volcengine/verl/issues/721).",
    "Check for degenerate batches where every response hits the max length.",
]


def _warning(
    key: str,
    signals: tuple[str, ...],
    found: Callable[[NonFinite, StepView], Facts | None],
    message: str,
    advice: list[str],
) -> Rule[NonFinite]:
    """A WARN rule that fires on the step's facts `found` finds; `message` is formatted with
    the step and them."""

    def describe(detector: NonFinite, view: StepView, severity: Severity) -> tuple[str, Facts]:
        evidence = {name: rounded(value) for name, value in (found(detector, view) or {}).items()}
        said = ", ".join(f"{name} = {value:g}" for name, value in evidence.items())
        return message.format(step=view.step, facts=said), evidence

    return Rule(
        key,
        signals=signals,
        fires=lambda detector, view: "warn" if found(detector, view) else None,
        describe=describe,
        advice=advice,
    )


class NonFinite(Detector):
    """D1: non-finite statistics (CRITICAL), a skipped update or a pinned clamp (WARN)."""

    id = "nonfinite"

    def start(self) -> None:
        """The recent steps with a non-finite grad norm."""
        self.bad_grad_steps: list[int] = []
        self._bad: dict[str, float | str] = {}  # this step's non-finite fields
        self._reward_only = False  # whether they are the reward alone (its alert's advice)

    def observe(self, view: StepView) -> bool:
        """Collect this step's non-finite watched fields (scanned only when there can be any)."""
        scan = not view.all_finite or self.bad_grad_steps
        self._bad = self._nonfinite_fields(view) if scan else {}
        return True

    needs = (
        Need(
            frozenset({*WATCHED_SIGNALS, "grad_norm"}),
            "none of the watched statistics (losses, KL, entropy, reward, grad norm) logged",
        ),
    )

    def _nonfinite_fields(self, view: StepView) -> dict[str, float | str]:
        """Raw key -> JSON-safe value of every non-finite watched field (grad norm included)."""
        window = self.thresholds["grad_window_steps"]
        self.bad_grad_steps = [s for s in self.bad_grad_steps if s > view.step - window]
        if view.all_finite:
            return {}
        bad: dict[str, float | str] = {
            view.sources[name]: to_wire(view.values[name])
            for name in WATCHED_SIGNALS
            if name in view.values and not is_finite(view.values[name])
        }
        grad = view.values.get("grad_norm")
        if grad is not None and not is_finite(grad):
            self.bad_grad_steps.append(view.step)
            bad[view.sources["grad_norm"]] = to_wire(grad)
        return bad

    def _pinned(self, view: StepView) -> Facts | None:
        pinned = {}
        kl_loss, ppo_kl = view.finite("kl_loss"), view.finite("ppo_kl")
        if kl_loss is not None and kl_loss >= self.thresholds["kl_loss_clamp"]:
            pinned[view.sources["kl_loss"]] = kl_loss
        if ppo_kl is not None and abs(ppo_kl) >= self.thresholds["ppo_kl_clamp"]:
            pinned[view.sources["ppo_kl"]] = ppo_kl
        return pinned or None

    def _negative_sequence_kl(self, view: StepView) -> Facts | None:
        kl = view.finite("kl_ref_seq")
        if kl is None or kl >= self.thresholds["sequence_kl_negative"]:
            return None
        return {view.sources["kl_ref_seq"]: kl}

    def _nonfinite_severity(self, view: StepView) -> Severity | None:
        bad = self._bad
        if not bad:
            return None
        grad_only = list(bad) == [view.sources.get("grad_norm")]
        repeated = len(self.bad_grad_steps) >= self.thresholds["grad_critical_count"]
        return "warn" if grad_only and not repeated else "critical"

    def _describe_nonfinite(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        bad = self._bad
        # Only the reward, with losses and grad norm finite: the parameters are not its cause.
        self._reward_only = list(bad) == [view.sources.get("reward_mean")]
        evidence = {"fields": bad, "non_finite_grad_steps": list(self.bad_grad_steps)}
        return _nonfinite_message(view.step, bad, severity, self._reward_only), evidence

    def _nonfinite_advice(self, severity: Severity) -> list[str]:
        return ADVICE_REWARD_BUG if self._reward_only else ADVICE_NONFINITE

    rules: ClassVar[tuple[Rule[NonFinite], ...]] = (
        Rule(
            "nonfinite",
            signals=(*WATCHED_SIGNALS, "grad_norm"),
            fires=_nonfinite_severity,
            describe=_describe_nonfinite,
            advice=_nonfinite_advice,
            primary=True,
        ),
        _warning(
            "pinned_at_clamp",
            ("kl_loss", "ppo_kl"),
            _pinned,
            "Values pinned at an internal clamp at step {step} ({facts}): the k3 per-token clamp "
            "is 10 and the log-ratio clamp 20, so the true values are larger.",
            ["Lower the learning rate; check rollout/trainer log-prob agreement."],
        ),
        _warning(
            "negative_kl",
            ("kl_ref_seq",),
            _negative_sequence_kl,
            "Sequence KL to the reference is below -1 at step {step} ({facts}); old TRL warned "
            "this 'might be a precursor for failed training'.",
            ["Check generation settings (sampling must match the trainer's policy)."],
        ),
    )


def _nonfinite_message(
    step: int, bad: dict[str, float | str], severity: Severity, reward_only: bool
) -> str:
    fields = ", ".join(f"{name}={value}" for name, value in sorted(bad.items()))
    if reward_only:
        return (
            f"Non-finite reward at step {step} ({fields}) while the other training statistics "
            "are finite: a bug in the reward function, not corrupted parameters. Check it for a "
            "division by zero or NaN from parsing before the next update uses it."
        )
    if severity == "warn":
        return (
            f"Non-finite grad norm at step {step} ({fields}): the optimizer step was probably "
            "skipped (verl zeroes such gradients). Watch for repeats: two in 10 steps is critical."
        )
    return (
        f"Non-finite training statistics at step {step} ({fields}). Parameters are probably "
        f"corrupted from this step on. Stop and resume from the last checkpoint before {step}."
    )
