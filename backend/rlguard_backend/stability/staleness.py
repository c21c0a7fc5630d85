"""Async RL (DETECTORS.md, "v3 additions"): trained samples growing staler than the pipeline's
design allows.

An async pipeline trains on samples a few policy versions old by design: a one-step-off run
sits at 1, a fully-async run with a maximum staleness K anywhere up to K. What goes wrong is
staleness growing past that (rollouts queue up faster than the trainer consumes them, or the
bound is not enforced: prime-rl#2812, AReaL#602), so the importance ratios of PPO/GRPO span
more policy change than they were built for. The design comes from the run config when it
names the bound (RunContext.max_staleness), else from the run's own settled level.
"""

from __future__ import annotations

from typing import ClassVar

from rlguard_backend.stability.events import Severity
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.primitives import SettledLevel, rounded
from rlguard_backend.stability.rules import Detector, Facts, Need, Rule

STALENESS_ADVICE = [
    "Lower the maximum staleness (verl trainer.v1.sampler.max_off_policy_threshold, prime-rl "
    "orchestrator.max_off_policy_steps, AReaL rollout.max_head_offpolicyness, NeMo-RL "
    "grpo.async_grpo.max_trajectory_age_steps, slime --max-policy-version-lag), or give the "
    "trainer more throughput relative to the rollout so that samples stop queueing.",
    "Drop stale groups (verl trainer.v1.sampler.max_off_policy_strategy=drop) or reweight "
    "them against the policy that generated them: decoupled PPO (AReaL use_decoupled_loss) or "
    "rollout importance-sampling correction (verl algorithm.rollout_correction).",
]


class Staleness(Detector):
    """Staleness of the trained samples past the pipeline's designed (or settled) level."""

    id = "staleness"
    reads = Need(
        frozenset({"rollout_staleness"}),
        "no policy-version staleness logged (async pipelines only): disabled",
    )
    needs_context = (
        (
            "max_staleness",
            "no designed maximum staleness in the run config: judged against the run's own "
            "settled level",
        ),
    )

    def start(self) -> None:
        """The run's settled staleness level, and the bound it implies (None: not yet known)."""
        self.level = SettledLevel(self.thresholds["settle_steps"])
        self._bound: float | None = None
        self._bound_final = False  # the level is known: the bound no longer changes

    def observe(self, view: StepView) -> bool:
        """Fold this step's staleness into the settled level and the bound it implies."""
        staleness = view.finite("rollout_staleness")
        if staleness is None:
            return False
        if not self._bound_final:
            level = self.level.update(view.steps_since_start - view.warmup_steps, staleness)
            self._bound, self._bound_final = self._bound_of(level), level is not None
        return True

    def _bound_of(self, level: float | None) -> float | None:
        """max(K, L) + hint_margin with a designed maximum K, else max(growth x L, L + margin)."""
        thresholds, designed = self.thresholds, self.context.max_staleness
        if designed is not None:
            return max(designed, level or 0.0) + thresholds["hint_margin"]
        if level is None:
            return None
        return max(thresholds["growth"] * level, level + thresholds["margin"])

    def _grown(self, view: StepView) -> Severity | None:
        smoothed, bound = view.smoothed["rollout_staleness"], self._bound
        if smoothed is None or bound is None or not view.warm or smoothed <= bound:
            return None
        return "critical" if smoothed > self.thresholds["critical_factor"] * bound else "warn"

    def _describe(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        smoothed, level = view.smoothed["rollout_staleness"] or 0.0, self.level.value
        designed = self.context.max_staleness
        if designed is not None:
            design = f"the designed maximum is {designed:g}"
        else:
            design = f"the run settled at {level:.3g} (no designed maximum in the run config)"
        message = (
            f"Trained samples are {smoothed:.3g} policy versions old on average, past "
            f"{self._bound:.3g}: {design}. Rollouts are queueing, or the staleness bound is "
            "not enforced, so each update's importance ratios span more policy change than "
            "the pipeline was built for."
        )
        facts = {
            "staleness": rounded(smoothed),
            "settled_level": rounded(level),
            "designed_max": designed,
            "bound": rounded(self._bound),
            "key": view.sources.get("rollout_staleness"),
        }
        return message, {name: value for name, value in facts.items() if value is not None}

    rules: ClassVar[tuple[Rule[Staleness], ...]] = (
        Rule(
            "staleness_growth",
            signals=("rollout_staleness",),
            fires=_grown,
            persistence="persistence",
            describe=_describe,
            advice=STALENESS_ADVICE,
        ),
    )
