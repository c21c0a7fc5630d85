"""D3 and D5 (DETECTORS.md §3): the KL to the reference and the penalty on it.

D3: KL running away from the reference, or an in-reward KL term too weak to matter. D5: a KL
penalty so strong, or binding, that it holds the policy still while reward stagnates.
"""

from __future__ import annotations

from typing import ClassVar

from rlguard_backend.stability.context import RunContext
from rlguard_backend.stability.events import Severity, capped
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.primitives import Baseline, median, rounded, times
from rlguard_backend.stability.rules import Detector, Facts, Need, Rule

# The KLs to the reference a trainer logs: the observations derive kl_ref from them.
READS = Need(
    frozenset({"kl_loss", "reward_kl_penalty", "kl_ref_seq"}),
    "no KL to the reference logged (actor/kl_loss, actor/reward_kl_penalty, kl)",
)
RUNAWAY_ADVICE = [
    "Sweep beta on a log grid while logging KL.",
    "Use an adaptive controller toward a target KL (verl kl_ctrl.type=adaptive).",
    "For verifiable rewards, drop KL and guard with a held-out regression set.",
    "Inspect samples for reward hacking.",
]
# Where the reference is not the policy's start (a teacher, a reset or resumed reference).
FAR_ADVICE = [
    "Roll back to a checkpoint from before the growth began (near_start_until_step) and lower "
    "the learning rate.",
    "In on-policy distillation, check that teacher and student score the same tokens (same "
    "tokenizer and chat template) and that the teacher's log-probs are fresh.",
    "If the reference was swapped or reset on purpose, set the run config key reference "
    "(initial or teacher) so the limits match it.",
]


def smoothed_kl(view: StepView) -> float | None:
    """The smoothed KL to the reference, at a step that logs it."""
    return None if view.finite("kl_ref") is None else view.smoothed["kl_ref"]


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
    """D3: KL to the reference growing without reward, or past its limits: absolute ones where
    the reference is the policy's own start (KL near 0 at first), else ones relative to the
    run's own start (a teacher, a reset or resumed reference). A drop of KL near 0 (the
    reference reset to the current policy) starts a new baseline."""

    id = "kl_runaway"
    reads = READS

    def start(self) -> None:
        """The growth streak, and the current reference's start: its first KL points."""
        self.growth_streak = 0  # steps in a row KL grew, accelerating, with no reward gain
        self.resets = 0  # reference resets seen (KL dropping near 0)
        self.start_step: int | None = None  # the current reference's first KL point
        self.start_points: list[float] = []  # its first raw KL points (as many as a Baseline's)
        self.near_start_step: int | None = None  # last step k̄ stayed near that start
        # This step's smoothed KL, its value lookback_steps ago, their ratio, penalty share.
        self._kl, self._growth = 0.0, 1.0
        self._before: float | None = None
        self._share: float | None = None
        # The current reference's start (median of start_points), whether the run is judged
        # against it (far), and this step's WARN and CRITICAL levels.
        self._start: float | None = None
        self._far = False
        self._warn_at, self._critical_at = 0.0, 0.0

    needs = (Need(frozenset({"reward_mean"}), "no reward logged: growth rule one level weaker"),)

    def observe(self, view: StepView) -> bool:
        """This step's KL, its growth over the lookback, its limits and the penalty share."""
        kl = smoothed_kl(view)
        if kl is None:
            return False
        thresholds = self.thresholds
        self._follow_start(view, kl)
        before = view.kl_ago(view.step, thresholds["lookback_steps"])
        growth = 1.0 if before is None else (kl / before if before > 0 else float("inf"))
        self._kl, self._before, self._growth = kl, before, growth
        growing = (
            view.warm
            and kl >= thresholds["floor"]
            and growth >= thresholds["growth"]
            and self._accelerating(view, kl, before)
            and not view.reward.rising
        )
        self.growth_streak = self.growth_streak + 1 if growing else 0
        self._share = None
        if self.context.kl_placement == "reward":
            self._share = penalty_share(view, current_beta(view, self.context))
        return True

    def _follow_start(self, view: StepView, kl: float) -> None:
        """Track the current reference's start (a new one after a reset) and set this step's
        limits: absolute near a start at 0, relative to the start when it is far."""
        if view.kl_reset:
            self.resets += 1
            self.start_points = []
        if len(self.start_points) < Baseline.POINTS:  # finite: kl is not None
            if not self.start_points:
                self.start_step = view.step
            self.start_points.append(view.values["kl_ref"])
            self._start = None
        start = self._start
        if start is None:  # a new point, or the first step after a load: new limits
            start = self._start = median(self.start_points)
            self._set_limits(start)
        if self._far and kl <= self.thresholds["clear_growth"] * start:
            self.near_start_step = view.step

    def _set_limits(self, start: float) -> None:
        """WARN and CRITICAL levels for this start: absolute near 0, else relative to it."""
        thresholds, hint = self.thresholds, self.context.reference
        teacher = hint == "teacher" and self.resets == 0  # until a reset to the policy itself
        self._far = teacher or (hint != "initial" and start >= thresholds["far_start"])
        warn_at, critical_at = thresholds["level_warn"], thresholds["level_critical"]
        if self._far:
            warn_floor = thresholds["floor"] if teacher else warn_at
            warn_at = max(warn_floor, thresholds["start_warn"] * start)
            critical_at = max(critical_at, thresholds["start_critical"] * start)
        self._warn_at, self._critical_at = warn_at, critical_at

    def _accelerating(self, view: StepView, kl: float, before: float | None) -> bool:
        """Not decelerating: k̄_t - k̄_{t-25} >= k̄_{t-25} - k̄_{t-50}."""
        middle = view.kl_ago(view.step, self.thresholds["lookback_steps"] / 2)
        return before is not None and middle is not None and kl - middle >= middle - before

    def _growth_degraded(self, view: StepView) -> bool:
        """A WARN from the growth rule, without a reward trend to judge it by."""
        return self.growth_streak >= self.thresholds["persistence"] and not view.reward.known

    def _runaway(self, view: StepView) -> Severity | None:
        kl = self._kl
        if kl >= self._critical_at:
            return "critical"
        if kl >= self._warn_at or self.growth_streak >= self.thresholds["persistence"]:
            return capped("warn", self._growth_degraded(view))
        return None

    def _describe_runaway(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        facts: Facts = {
            "kl": rounded(self._kl),
            "kl_source": view.kl_source,
            "kl_lookback": rounded(self._before),
            "growth": rounded(self._growth),
            **self._reference_facts(),
            **view.reward.evidence(),
        }
        if self._growth_degraded(view) and self._kl < self._critical_at:
            facts["degraded"] = "no reward logged: growth judged without a reward trend"
        if self._kl >= self._warn_at and "growth_vs_start" in facts:
            since = self.near_start_step
            stayed = "" if since is None else f"; it stayed near that start until step {since}"
            message = (
                f"KL to the reference is {facts['kl']} nats/token, ×{facts['growth_vs_start']} "
                f"its own start of {facts['kl_start']}{stayed}. The run started far from its "
                f"reference ({facts['reference']}), so it is judged against that start, not the "
                "absolute limits: this is a runaway from it."
            )
        elif self._kl >= self._warn_at:
            message = (
                f"KL to the reference is {facts['kl']} nats/token: past the level where the k3 "
                "estimate is noisy and its gradient far from the reverse-KL one; the policy has "
                "drifted far from the reference."
            )
        else:
            message = (
                f"KL to the reference is {facts['kl']} nats/token and still accelerating "
                f"(grown {times(facts['growth'])} in 50 steps) while {view.reward.verdict()}: the "
                "policy may be drifting for no reward (possible reward hacking or an ineffective "
                "penalty)."
            )
        return message, facts

    def _reference_facts(self) -> Facts:
        """What the KL is judged against: the reference, its start and the limits."""
        thresholds, start = self.thresholds, self._start
        hint = self.context.reference
        if not self._far:
            where = "run config reference: initial" if hint == "initial" else "KL started near 0"
            reference = f"the policy's own start ({where}): absolute limits"
        elif hint == "teacher" and self.resets == 0:
            reference = "a teacher (run config reference: teacher)"
        else:
            reference = (
                f"its first KL points were at or above {thresholds['far_start']} nats/token, as "
                "with a teacher, a reset or a resumed reference"
            )
        facts: Facts = {
            "reference": reference,
            "kl_start": rounded(start),
            "kl_start_step": self.start_step,
            "kl_start_points": len(self.start_points),
            "warn_at": rounded(self._warn_at),
            "critical_at": rounded(self._critical_at),
        }
        if self._far and start is not None and start > 0:
            facts["growth_vs_start"] = rounded(self._kl / start, 3)
            facts["near_start_until_step"] = self.near_start_step
        if self.resets:
            facts["reference_resets"] = self.resets
        return facts

    def _runaway_advice(self, severity: Severity) -> list[str]:
        if not self._far:
            return RUNAWAY_ADVICE
        return [*FAR_ADVICE, *RUNAWAY_ADVICE]

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

    rules: ClassVar[tuple[Rule[KlRunaway], ...]] = (
        Rule(
            "kl_runaway",
            signals=("kl_ref", "reward_mean"),
            fires=_runaway,
            clears=(lambda d, v: d._growth < d.thresholds["clear_growth"] and d._kl < d._warn_at,),
            describe=_describe_runaway,
            advice=_runaway_advice,
        ),
        Rule(
            "kl_penalty_ineffective",
            signals=("kl_ref", "response_length", "reward_std", "kl_coef", "reward_kl_coef"),
            fires=_weak_penalty,
            persistence="penalty_share_persistence",
            describe=_describe_share,
            enabled=lambda d: d.context.kl_placement == "reward",  # the share needs in-reward KL
            advice=["Compare beta with reward differences; sweep beta up on a log grid."],
        ),
    )


STRONG_ADVICE = [
    "Sweep beta down on a log grid (per-sequence penalty ≈ beta·KL·length vs reward gaps).",
    "Use an adaptive controller with a target KL.",
    "For verifiable rewards, drop the KL term (DAPO §2.3, DeepSWE).",
    "If KL has plateaued at a nonzero level, reset the reference to the current policy and "
    "reinitialise the optimizer (ProRL).",
]


class KlPenalty(Detector):
    """D5: a KL penalty that holds the policy still while reward stagnates."""

    id = "kl_penalty"
    reads = READS

    def start(self) -> None:
        """This step's KL, beta, penalty share and reward verdict, set by observe()."""
        self._kl, self._beta = 0.0, 0.0  # this step's smoothed KL and beta
        self._share: float | None = None  # this step's penalty share (in-reward KL)
        self._stagnant = False

    def missing(self, seen: frozenset[str]) -> str | None:
        """Disabled without a KL coefficient (logged or configured) or without reward."""
        if not seen & {"kl_coef", "reward_kl_coef"} and self.context.kl_coef is None:
            return "no KL coefficient logged or in run config (kl_coef): disabled"
        if "reward_mean" not in seen:
            return "no reward logged: disabled"
        return None

    def observe(self, view: StepView) -> bool:
        """This step's KL, beta and penalty share; False without a positive beta."""
        kl, beta = smoothed_kl(view), current_beta(view, self.context)
        if kl is None or not beta or beta <= 0:
            return False
        active = view.steps_since_start >= self.thresholds["min_step"] and view.reward.known
        self._stagnant = active and view.reward.stagnant
        self._kl, self._beta, self._share = kl, beta, None
        if self.context.kl_placement == "reward":
            self._share = penalty_share(view, beta)
        return True

    def _strong(self, view: StepView) -> Severity | None:
        thresholds, rho, share = self.thresholds, view.rho, self._share
        unmoved = self._kl < thresholds["small_kl"] and (
            rho is None or rho > thresholds["unmoved_entropy_ratio"]
        )
        dominant = share is not None and share >= thresholds["strong_share"]
        if not (self._stagnant and (unmoved or dominant)):
            return None
        return capped("warn", rho is None and not dominant)

    def _describe_strong(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        kl, beta, rho = self._kl, self._beta, view.rho
        streak = self.progress["kl_penalty_strong"].streak
        facts: Facts = {
            "kl": rounded(kl),
            "beta": beta,
            "entropy_ratio": rounded(rho),
            "penalty_share": rounded(self._share),
            "stagnant_points": streak,
            **view.reward.evidence(),
        }
        if rho is None:
            facts["degraded"] = "no entropy logged: 'policy not moving' judged from KL alone"
        held = f" and entropy is still at {rho:.0%} of its start" if rho is not None else ""
        message = (
            f"KL penalty dominates: KL stays at {kl:.3g} nats/token{held}, and reward "
            f"has not improved for {streak} points (beta={beta:.3g})."
        )
        return message, facts

    def _binding(self, view: StepView) -> Severity | None:
        thresholds, kl = self.thresholds, self._kl
        if not self._stagnant or kl < thresholds["small_kl"]:
            return None
        before = view.kl_ago(view.step, thresholds["binding_lookback_steps"])
        flat = (
            before is not None
            and before > 0
            and abs(kl / before - 1) < thresholds["binding_flatness"]
        )
        return "info" if flat else None

    def _describe_binding(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        kl, streak = self._kl, self.progress["kl_binding"].streak
        before = view.kl_ago(view.step, self.thresholds["binding_lookback_steps"])
        message = (
            f"KL is binding — consider a reference reset: KL has stayed at {kl:.3g} "
            f"nats/token while reward has not improved for {streak} points."
        )
        return message, {
            "kl": rounded(kl),
            "kl_lookback": rounded(before),
            **view.reward.evidence(),
        }

    rules: ClassVar[tuple[Rule[KlPenalty], ...]] = (
        Rule(
            "kl_penalty_strong",
            signals=("kl_ref", "kl_coef", "reward_kl_coef", "reward_mean", "entropy"),
            fires=_strong,
            persistence="persistence",
            clears=(lambda d, v: v.reward.improving,),
            describe=_describe_strong,
            advice=STRONG_ADVICE,
        ),
        Rule(
            "kl_binding",
            signals=("kl_ref", "kl_coef", "reward_kl_coef", "reward_mean"),
            fires=_binding,
            persistence="binding_persistence",
            clears=(lambda d, v: v.reward.improving,),
            describe=_describe_binding,
            advice=STRONG_ADVICE[3:],
        ),
    )
