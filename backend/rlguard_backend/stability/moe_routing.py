"""MoE routing health (DETECTORS.md, "v3 additions"): expert load drifting out of balance, and
router replay falling back to fresh routing.

Violation = how far an expert's token load is from the uniform share; its healthy level depends
on the model (experts, top-k, aux loss or none: verl turns the aux loss off for RL), so it is
judged against the run's own settled level, as a slow growth or a jump. A router that
concentrates tokens on a few experts makes the trainer's and the engine's routing disagree more
easily, which is the train-inference mismatch MoE RL runs collapse from.
"""

from __future__ import annotations

from typing import ClassVar

from rlguard_backend.stability.events import Severity
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.primitives import SettledLevel, SortedWindow, rounded
from rlguard_backend.stability.rules import Detector, Facts, Need, Rule

ROUTING_ADVICE = [
    "Replay the rollout's routing in the trainer (R3: verl "
    "actor_rollout_ref.actor.router_replay.mode=R3, NeMo-RL policy.router_replay.enabled) so "
    "that both sides use the same experts for a token.",
    "Raise the load-balancing aux-loss coefficient (Megatron moe_aux_loss_coeff, HF "
    "router_aux_loss_coef) if it was turned off or set low for RL.",
    "Check the train-inference mismatch (rollout_mismatch): concentrated routing widens it.",
]
FALLBACK_ADVICE = [
    "Router replay is routing tokens afresh where the engine returned no route: check that "
    "the engine returns routed experts for every token (vLLM enable_return_routed_experts) "
    "and that the rollout and trainer see the same sequences (truncation, padding).",
]
VIOLATIONS = ("moe_max_vio", "moe_avg_vio")  # the first logged one is judged


class MoeRouting(Detector):
    """Expert load violation growing or jumping; R3 fallback routes leaving ~0."""

    id = "moe_routing"
    reads = Need(
        frozenset({*VIOLATIONS, "moe_fallback_fraction"}),
        "no MoE routing statistics logged (dense model, or load-balance metrics off): disabled",
    )

    def start(self) -> None:
        """The violation's settled level and its recent points; this step's measure."""
        thresholds = self.thresholds
        self.level = SettledLevel(thresholds["settle_steps"])
        self.recent = SortedWindow(int(thresholds["jump_points"]))
        self._name: str | None = None  # the violation signal this step logs
        self._jumped = False
        self._jump_min_points = thresholds["jump_min_points"]

    def observe(self, view: StepView) -> bool:
        """Fold this step's violation into the level and the recent points (jump first)."""
        name, self._jumped = VIOLATIONS[0], False
        violation = view.finite(name)
        if violation is None:
            name = VIOLATIONS[1]
            violation = view.finite(name)
        self._name = None if violation is None else name
        if violation is None:
            return True  # the fallback rule may still read this step
        recent, thresholds = self.recent, self.thresholds
        if len(recent) >= self._jump_min_points:
            usual = recent.median()
            self._jumped = (
                violation > thresholds["jump_factor"] * usual
                and violation - usual > thresholds["jump_floor"]
            )
        recent.push(violation)
        if self.level.value is None:
            self.level.update(view.steps_since_start - view.warmup_steps, violation)
        return True

    def _imbalance(self, view: StepView) -> Severity | None:
        level = self.level.value
        if self._name is None or level is None or not view.warm:
            return None
        smoothed, thresholds = view.smoothed[self._name] or 0.0, self.thresholds
        if (
            smoothed >= thresholds["critical_growth"] * level
            and smoothed - level >= thresholds["critical_floor"]
        ):
            return "critical"
        grown = smoothed >= thresholds["growth"] * level
        return "warn" if grown and smoothed - level >= thresholds["growth_floor"] else None

    def _facts(self, view: StepView) -> Facts:
        """The violation, its level and the routing confidence, as evidence."""
        name = self._name or VIOLATIONS[0]
        facts = {
            "violation": rounded(view.smoothed[name]),
            "violation_now": rounded(view.finite(name)),
            "settled_level": rounded(self.level.value),
            "recent_median": rounded(self.recent.median()) if self.recent else None,
            "routing_confidence": rounded(view.finite("moe_routing_confidence")),
            "key": view.sources.get(name),
        }
        return {key: value for key, value in facts.items() if value is not None}

    def _describe_imbalance(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        facts = self._facts(view)
        violation, level = facts["violation"], self.level.value or 0.0
        grown = f"×{violation / level:.3g} its settled level {level:.3g}" if level else "from 0"
        message = (
            f"MoE load violation is {violation:.3g}, {grown}: the router sends ever more "
            "tokens to a few experts, which makes trainer and engine routing disagree more "
            "easily."
        )
        return message, facts

    def _describe_jump(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        facts = self._facts(view)
        message = (
            f"MoE load violation jumped to {facts['violation_now']:.3g} from a recent median "
            f"of {facts.get('recent_median', 0.0):.3g}: the routing changed abruptly."
        )
        return message, facts

    def _fallback(self, view: StepView) -> Severity | None:
        fraction, thresholds = view.finite("moe_fallback_fraction"), self.thresholds
        if fraction is None or fraction <= thresholds["fallback_warn"]:
            return None
        return "critical" if fraction > thresholds["fallback_critical"] else "warn"

    def _describe_fallback(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        fraction = view.finite("moe_fallback_fraction") or 0.0
        message = (
            f"Router replay fell back to fresh routing on {fraction:.2%} of token routes "
            "(≈ 0 when healthy): those tokens may use other experts in the trainer than in "
            "the rollout."
        )
        return message, {"fallback_fraction": rounded(fraction)}

    rules: ClassVar[tuple[Rule[MoeRouting], ...]] = (
        Rule(
            "moe_load_imbalance",
            signals=(*VIOLATIONS, "moe_routing_confidence"),
            fires=_imbalance,
            persistence="persistence",
            describe=_describe_imbalance,
            advice=ROUTING_ADVICE,
        ),
        Rule(
            "moe_load_jump",
            signals=VIOLATIONS,
            fires=lambda d, v: "warn" if d._jumped else None,
            persistence="jump_persistence",
            describe=_describe_jump,
            advice=ROUTING_ADVICE,
        ),
        Rule(
            "moe_route_fallback",
            signals=("moe_fallback_fraction",),
            fires=_fallback,
            persistence="fallback_persistence",
            describe=_describe_fallback,
            advice=FALLBACK_ADVICE,
        ),
    )
