"""D3: runaway KL to the reference policy (DETECTORS.md §3 D3).

Alert keys: ``kl_runaway`` (WARN growth: accelerating KL >= 0.05 with no reward gain, P=5; WARN
level k >= 0.5; CRITICAL k >= 1.0 nats/token) and ``kl_penalty_ineffective`` (INFO, in-reward
KL only: per-sequence penalty beta*k*length below 1 % of the reward spread).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rlguard_backend.stability.base import Detector, Stops, capped
from rlguard_backend.stability.columns import (
    NOT_QUIET,
    Columns,
    Quiet,
    ago,
    integral,
    push_points,
    run_lengths,
    silent,
)
from rlguard_backend.stability.context import RunContext
from rlguard_backend.stability.events import CLEARED, SEVERITY_RANK, Severity, Verdict
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.primitives import Lookback, rounded
from rlguard_backend.stability.thresholds import Thresholds

WARN, CRITICAL = SEVERITY_RANK["warn"], SEVERITY_RANK["critical"]
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
    keys = ("kl_runaway", "kl_penalty_ineffective")
    reads = frozenset({"kl_loss", "reward_kl_penalty", "kl_ref_seq"})  # kl_ref comes from these

    def __init__(
        self, context: RunContext, thresholds: Thresholds, open_keys: set[str] | None = None
    ) -> None:
        super().__init__(context, thresholds, open_keys)
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

    def evaluate(self, view: StepView) -> Sequence[Verdict | None]:
        kl = view.smoothed["kl_ref"]
        if view.finite("kl_ref") is None or kl is None:
            return ()
        self.history.push(view.step, kl)
        before = self.history.ago(view.step, self.th["lookback_steps"])
        growth = 1.0 if before is None else (kl / before if before > 0 else float("inf"))
        return self._runaway(view, kl, before, growth), self._share(view)

    def quiet_prefix(self, cols: Columns) -> Quiet:
        th, n = self.th, cols.n
        kl = cols.smoothed["kl_ref"]
        if cols.value("kl_ref") is None or kl is None:
            return silent(n)
        lookback = th["lookback_steps"]
        if self.context.kl_placement == "reward" or not integral(lookback):
            return NOT_QUIET  # the penalty-share rule runs step by step
        before, known = ago(self.history, cols.steps, kl, lookback)
        growth = np.ones(n)
        np.divide(kl, before, out=growth, where=known & (before > 0))
        growth[known & ~(before > 0)] = np.inf
        calm = run_lengths(
            (growth < th["clear_growth"]) & (kl < th["level_warn"]), self.calm_streak
        )
        stops = Stops(self, cols)
        if float(kl.max()) < min(th["floor"], th["level_warn"], th["level_critical"]):
            # Below the growth rule's floor and both levels: nothing fires, streaks reset.
            streak = np.zeros(n, dtype=np.int64)
            stops.clears("kl_runaway", calm)
        else:
            middle, known_middle = ago(self.history, cols.steps, kl, lookback / 2)
            accelerating = known & known_middle & (kl - middle >= middle - before)
            growing = (
                cols.warm
                & (kl >= th["floor"])
                & (growth >= th["growth"])
                & accelerating
                & ~cols.improving
            )
            streak = run_lengths(growing, self.growth_streak)
            critical = kl >= th["level_critical"]
            persistent = streak >= th["persistence"]
            warn = ~critical & ((kl >= th["level_warn"]) | persistent)
            rank = np.where(critical, CRITICAL, WARN)
            if not cols.reward_known:  # the growth rule alone, without a reward: capped
                rank = rank - (warn & persistent)
            stops.rule("kl_runaway", critical | warn, rank, calm >= th["clear_steps"])
        # No share outside in-reward KL: its rule counts quiet steps.
        stops.clears("kl_penalty_ineffective", self.share_quiet)

        def advance(begin: int, end: int) -> None:
            push_points(self.history, cols.step_list[begin:end], kl[begin:end])
            self.growth_streak, self.calm_streak = int(streak[end - 1]), int(calm[end - 1])
            self.share_streak = 0
            self.share_quiet += end - begin

        return stops.quiet(advance)

    def _accelerating(self, step: int, kl: float, before: float | None) -> bool:
        """Not decelerating: k̄_t - k̄_{t-25} >= k̄_{t-25} - k̄_{t-50}."""
        middle = self.history.ago(step, self.th["lookback_steps"] / 2)
        return before is not None and middle is not None and kl - middle >= middle - before

    def _runaway(
        self, view: StepView, kl: float, before: float | None, growth: float
    ) -> Verdict | None:
        th, reward = self.th, view.reward
        growing = (
            view.warm
            and kl >= th["floor"]
            and growth >= th["growth"]
            and self._accelerating(view.step, kl, before)
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
            key = "kl_runaway"
            return CLEARED[key] if key in self.open_keys and calm >= th["clear_steps"] else None
        degraded = streak >= th["persistence"] and severity == "warn" and not reward.known
        if not view.emits(self.id, "kl_runaway", capped(severity, degraded)):
            return None
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

    def _share(self, view: StepView) -> Verdict | None:
        th, share = self.th, None
        if self.context.kl_placement == "reward":
            share = penalty_share(view, current_beta(view, self.context))
        weak = share is not None and view.warm and share < th["penalty_share_min"]
        self.share_streak = streak = self.share_streak + 1 if weak else 0
        self.share_quiet = quiet = self.share_quiet + 1 if not weak else 0
        if share is None or streak < th["penalty_share_persistence"]:
            key = "kl_penalty_ineffective"
            return CLEARED[key] if key in self.open_keys and quiet >= th["clear_steps"] else None
        if not view.emits(self.id, "kl_penalty_ineffective", "info"):
            return None
        return Verdict(
            "kl_penalty_ineffective",
            "info",
            message=f"The in-reward KL term has no measurable effect: per-sequence penalty "
            f"beta*KL*length is {share:.2%} of the reward spread.",
            evidence={"penalty_share": rounded(share), "kl": rounded(view.smoothed["kl_ref"])},
            advice=["Compare beta with reward differences; sweep beta up on a log grid."],
        )


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
