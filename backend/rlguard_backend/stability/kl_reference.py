"""D3 (DETECTORS.md §3): runaway KL to the reference; an in-reward KL term too weak to matter."""

from __future__ import annotations

from rlguard_backend.stability.context import RunContext
from rlguard_backend.stability.events import Severity, capped
from rlguard_backend.stability.observations import RewardState, StepView
from rlguard_backend.stability.primitives import Lookback, rounded
from rlguard_backend.stability.rules import Detector, Facts, Rule

RUNAWAY_ADVICE = [
    "Sweep beta on a log grid while logging KL.",
    "Use an adaptive controller toward a target KL (verl kl_ctrl.type=adaptive).",
    "For verifiable rewards, drop KL and guard with a held-out regression set.",
    "Inspect samples for reward hacking.",
]


def penalty_share(view: StepView, beta: float | None) -> float | None:
    """s = beta * k * length / reward spread: per-sequence penalty vs reward differences."""
    kl, length = view.smoothed["kl_ref"], view.smoothed["response_length"]
    spread = view.finite("reward_std")
    if beta is None or kl is None or length is None or not spread:
        return None
    return beta * kl * length / spread


def current_beta(view: StepView, context: RunContext) -> float | None:
    """The KL coefficient in force: logged if the trainer logs it, else the configured one."""
    first, second = "kl_coef", "reward_kl_coef"
    if context.kl_placement == "reward":
        first, second = second, first
    value = view.finite(first)
    if value is None:
        value = view.finite(second)
    return context.kl_coef if value is None else value


class KlRunaway(Detector):
    """D3: KL to the reference growing without reward, or past absolute limits."""

    id = "kl_runaway"
    reads = frozenset({"kl_loss", "reward_kl_penalty", "kl_ref_seq"})  # kl_ref comes from these

    def start(self) -> None:
        self.history = Lookback(int(self.thresholds["lookback_steps"]))
        self.growth_streak = 0  # steps in a row KL grew, accelerating, with no reward gain
        # This step's smoothed KL, its value lookback_steps ago, their ratio, penalty share.
        self._kl, self._growth = 0.0, 1.0
        self._before: float | None = None
        self._share: float | None = None

    def missing(self, seen: frozenset[str]) -> str | None:
        if not seen & {"kl_loss", "reward_kl_penalty", "kl_ref_seq"}:
            return "no KL to the reference logged (actor/kl_loss, actor/reward_kl_penalty, kl)"
        if "reward_mean" not in seen:
            return "no reward logged: growth rule one level weaker"
        return None

    def observe(self, view: StepView) -> bool:
        kl = view.smoothed["kl_ref"]
        if view.finite("kl_ref") is None or kl is None:
            return False
        th = self.thresholds
        self.history.push(view.step, kl)
        before = self.history.ago(view.step, th["lookback_steps"])
        growth = 1.0 if before is None else (kl / before if before > 0 else float("inf"))
        self._kl, self._before, self._growth = kl, before, growth
        growing = (
            view.warm
            and kl >= th["floor"]
            and growth >= th["growth"]
            and self._accelerating(view.step, kl, before)
            and not view.reward.rising
        )
        self.growth_streak = self.growth_streak + 1 if growing else 0
        self._share = None
        if self.context.kl_placement == "reward":
            self._share = penalty_share(view, current_beta(view, self.context))
        return True

    def _accelerating(self, step: int, kl: float, before: float | None) -> bool:
        """Not decelerating: k̄_t - k̄_{t-25} >= k̄_{t-25} - k̄_{t-50}."""
        middle = self.history.ago(step, self.thresholds["lookback_steps"] / 2)
        return before is not None and middle is not None and kl - middle >= middle - before

    def _growth_degraded(self, view: StepView, severity: Severity | None) -> bool:
        """The growth rule alone, without a reward trend to judge it by."""
        grown = self.growth_streak >= self.thresholds["persistence"]
        return grown and severity == "warn" and not view.reward.known

    def _runaway(self, view: StepView) -> Severity | None:
        th, kl = self.thresholds, self._kl
        severity: Severity | None = None
        if kl >= th["level_critical"]:
            severity = "critical"
        elif kl >= th["level_warn"] or self.growth_streak >= th["persistence"]:
            severity = "warn"
        return capped(severity, self._growth_degraded(view, severity))

    def _calm(self, view: StepView) -> bool:
        th = self.thresholds
        return self._growth < th["clear_growth"] and self._kl < th["level_warn"]

    def _describe_runaway(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        facts: Facts = {
            "kl": rounded(self._kl),
            "kl_source": view.kl_source,
            "kl_lookback": rounded(self._before),
            "growth": rounded(self._growth),
            **view.reward.evidence(),
        }
        if self._growth_degraded(view, "warn") and self._kl < self.thresholds["level_critical"]:
            facts["degraded"] = "no reward logged: growth judged without a reward trend"
        return _runaway_message(
            facts, self._kl >= self.thresholds["level_warn"], view.reward
        ), facts

    def _weak_penalty(self, view: StepView) -> Severity | None:
        share = self._share
        weak = share is not None and view.warm and share < self.thresholds["penalty_share_min"]
        return "info" if weak else None

    def _describe_share(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        message = (
            "The in-reward KL term has no measurable effect: per-sequence penalty "
            f"beta*KL*length is {self._share:.2%} of the reward spread."
        )
        facts = {"penalty_share": rounded(self._share), "kl": rounded(view.smoothed["kl_ref"])}
        return message, facts

    rules = (
        Rule(
            "kl_runaway",
            signals=("kl_ref", "reward_mean"),
            fires=_runaway,
            clears=_calm,
            describe=_describe_runaway,
            advice=RUNAWAY_ADVICE,
        ),
        Rule(
            "kl_penalty_ineffective",
            signals=("kl_ref", "response_length", "reward_std", "kl_coef", "reward_kl_coef"),
            fires=_weak_penalty,
            persistence="penalty_share_persistence",
            describe=_describe_share,
            advice=["Compare beta with reward differences; sweep beta up on a log grid."],
        ),
    )


def _runaway_message(facts: Facts, at_level: bool, reward: RewardState) -> str:
    if at_level:
        return (
            f"KL to the reference is {facts['kl']} nats/token: past the level where the k3 "
            "estimate is noisy and its gradient far from the reverse-KL one; the policy has "
            "drifted far from the reference."
        )
    return (
        f"KL to the reference is {facts['kl']} nats/token and still accelerating "
        f"(×{facts['growth']} in 50 steps) while {reward.verdict()}: the policy may be drifting "
        "for no reward (possible reward hacking or an ineffective penalty)."
    )
