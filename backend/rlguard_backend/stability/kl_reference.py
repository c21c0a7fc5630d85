"""D3: runaway KL to the reference policy (DETECTORS.md §3 D3).

Alert keys: ``kl_runaway`` (WARN growth: accelerating KL >= 0.05 with no reward gain, P=5; WARN
level k >= 0.5; CRITICAL k >= 1.0 nats/token) and ``kl_penalty_ineffective`` (INFO, in-reward
KL only: per-sequence penalty beta*k*length below 1 % of the reward spread).
"""

from __future__ import annotations

from typing import Any

from rlguard_backend.stability.base import Detector, capped
from rlguard_backend.stability.context import RunContext
from rlguard_backend.stability.events import QUIET, Severity, Verdict
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.primitives import Lookback, rounded
from rlguard_backend.stability.thresholds import Thresholds

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
    logged = ("reward_kl_coef", "kl_coef")
    if context.kl_placement != "reward":
        logged = ("kl_coef", "reward_kl_coef")
    for name in logged:
        value = view.finite(name)
        if value is not None:
            return value
    return context.kl_coef


class KlRunaway(Detector):
    """D3: KL to the reference growing without reward, or past absolute limits."""

    id = "kl_runaway"
    keys = ("kl_runaway", "kl_penalty_ineffective")

    def __init__(self, context: RunContext, thresholds: Thresholds) -> None:
        super().__init__(context, thresholds)
        self.history = Lookback(int(thresholds["lookback_steps"]))
        self.growth_streak = 0
        self.calm_streak = 0
        self.share_streak = 0
        self.share_quiet = 0

    def missing(self, seen: frozenset[str]) -> str | None:
        if not seen & {"kl_loss", "reward_kl_penalty", "kl_ref_seq"}:
            return "no KL to the reference logged (actor/kl_loss, actor/reward_kl_penalty, kl)"
        if "reward_mean" not in seen:
            return "no reward logged: growth rule one level weaker"
        return None

    def evaluate(self, view: StepView) -> list[Verdict]:
        kl = view.smoothed["kl_ref"]
        if view.finite("kl_ref") is None or kl is None:
            return []
        self.history.push(view.step, kl)
        lag = self.th["lookback_steps"]
        before, middle = self.history.ago(view.step, lag), self.history.ago(view.step, lag / 2)
        growth = _growth(kl, before)
        return [self._runaway(view, kl, before, middle, growth), self._share(view)]

    def _runaway(
        self, view: StepView, kl: float, before: float | None, middle: float | None, growth: float
    ) -> Verdict:
        th, reward = self.th, view.reward
        accelerating = before is not None and middle is not None and kl - middle >= middle - before
        growing = (
            view.warm
            and kl >= th["floor"]
            and growth >= th["growth"]
            and accelerating
            and not reward.improving
        )
        self.growth_streak = streak = self.growth_streak + 1 if growing else 0
        self.calm_streak = calm = (
            self.calm_streak + 1 if growth < th["clear_growth"] and kl < th["level_warn"] else 0
        )
        severity: Severity | None = None
        if kl >= th["level_critical"]:
            severity = "critical"
        elif kl >= th["level_warn"] or streak >= th["persistence"]:
            severity = "warn"
        if severity is None:
            return QUIET["kl_runaway"][calm >= th["clear_steps"]]
        degraded = streak >= th["persistence"] and severity == "warn" and not reward.known
        if not view.emits(self.id, "kl_runaway", capped(severity, degraded)):
            return Verdict("kl_runaway", capped(severity, degraded))
        facts: dict[str, Any] = {
            "kl": rounded(kl),
            "kl_source": view.kl_source,
            "kl_lookback": rounded(before),
            "growth": rounded(growth),
            **reward.evidence(),
        }
        if degraded:
            facts["degraded"] = "no reward logged: growth judged without a reward trend"
        return Verdict(
            "kl_runaway",
            capped(severity, degraded),
            message=_runaway_message(facts, kl >= th["level_warn"]),
            evidence=facts,
            advice=RUNAWAY_ADVICE,
        )

    def _share(self, view: StepView) -> Verdict:
        share = None
        if self.context.kl_placement == "reward":
            share = penalty_share(view, current_beta(view, self.context))
        weak = view.warm and share is not None and share < self.th["penalty_share_min"]
        self.share_streak = streak = self.share_streak + 1 if weak else 0
        self.share_quiet = quiet = self.share_quiet + 1 if not weak else 0
        if share is None or streak < self.th["penalty_share_persistence"]:
            return QUIET["kl_penalty_ineffective"][quiet >= self.th["clear_steps"]]
        if not view.emits(self.id, "kl_penalty_ineffective", "info"):
            return Verdict("kl_penalty_ineffective", "info")
        return Verdict(
            "kl_penalty_ineffective",
            "info",
            message=f"The in-reward KL term has no measurable effect: per-sequence penalty "
            f"beta*KL*length is {share:.2%} of the reward spread.",
            evidence={"penalty_share": rounded(share), "kl": rounded(view.smoothed["kl_ref"])},
            advice=["Compare beta with reward differences; sweep beta up on a log grid."],
        )


def _growth(kl: float, before: float | None) -> float:
    if before is None:
        return 1.0
    return kl / before if before > 0 else float("inf")


def _runaway_message(facts: dict[str, Any], at_level: bool) -> str:
    if at_level:
        return (
            f"KL to the reference is {facts['kl']} nats/token: past the level where the k3 "
            "estimate is noisy and its gradient far from the reverse-KL one; the policy has "
            "drifted far from the reference."
        )
    return (
        f"KL to the reference is {facts['kl']} nats/token and still accelerating "
        f"(×{facts['growth']} in 50 steps) while reward is flat: the policy is drifting for no "
        "reward (possible reward hacking or an ineffective penalty)."
    )
