"""D2: entropy collapse and its relatives (DETECTORS.md §3 D2).

Alert keys: ``entropy_collapse`` (E1 WARN "entropy spent, no reward bought", E2 CRITICAL
"collapse"), ``entropy_exhausted`` (E3 WARN with Z >= 0.5, else INFO), ``entropy_blowup`` (E4
WARN), ``no_learning_signal`` (E5 WARN). rho = smoothed entropy / its start (H0).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from rlguard_backend.stability.base import Detector, Stops, capped
from rlguard_backend.stability.columns import (
    Bools,
    Columns,
    Floats,
    Ints,
    Quiet,
    anywhere,
    first,
    run_lengths,
    window_shares,
)
from rlguard_backend.stability.context import RunContext
from rlguard_backend.stability.events import CLEARED, SEVERITY_RANK, Severity, Verdict
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.primitives import Window, rounded
from rlguard_backend.stability.thresholds import Thresholds

INFO, WARN, CRITICAL = SEVERITY_RANK["info"], SEVERITY_RANK["warn"], SEVERITY_RANK["critical"]
COLLAPSE_ADVICE = [
    "Lower LR or epochs (slows learning).",
    "KL to the initial policy with the k3+ gradient (costs pass@1).",
    "Small entropy bonus; watch for malformed outputs.",
    "Clip-higher (eps_high 0.28, DAPO), only if updates per batch > 1.",
    "Higher sampling temperature (only delays collapse).",
    "Clip-Cov / KL-Cov (policy_loss.loss_mode=clip_cov|kl_cov); adaptive entropy control "
    "(Skywork: target 0.2, coef step 1e-4, cap 0.005); dynamic sampling of zero-std groups (DAPO).",
    "Treat as a problem when pass@k drops or a known-good behaviour disappears; log pass@k.",
]


class EntropyCollapse(Detector):
    """D2 E1-E5: entropy spent without reward, exhausted, blowing up, or no gradient signal."""

    id = "entropy_collapse"
    keys = ("entropy_collapse", "entropy_exhausted", "entropy_blowup", "no_learning_signal")

    def __init__(
        self, context: RunContext, thresholds: Thresholds, open_keys: set[str] | None = None
    ) -> None:
        super().__init__(context, thresholds, open_keys)
        self.collapse_streak = 0
        self.recovered_streak = 0
        self.improving_streak = 0
        self.collapse_active = False
        self.exhausted_streak = 0
        self.exhausted_quiet = 0
        self.blowup_streak = 0
        self.blowup_quiet = 0
        self.signal_quiet = 0
        self.zero_grads = Window(int(thresholds["zero_grad_points"]))
        # Running sums for the least-squares fit R = b - a * exp(H) (EM's empirical law).
        self.fit_sums = [0.0, 0.0, 0.0, 0.0, 0.0]  # n, sum x, sum y, sum xx, sum xy

    def missing(self, seen: frozenset[str]) -> str | None:
        if "entropy" not in seen:
            return "no entropy logged (actor/entropy, entropy, ...): E1-E4 disabled"
        if "reward_mean" not in seen:
            return "no reward logged: E1/E2 one level weaker, E3 disabled"
        if "frac_zero_std" not in seen:
            return "no zero-std group fraction logged: E3 stays INFO, E2 uses length and rho only"
        return None

    def evaluate(self, view: StepView) -> Sequence[Verdict | None]:
        no_signal = self._no_signal(view)
        entropy, rho = view.finite("entropy"), view.rho
        if entropy is None or rho is None:
            return (no_signal,)
        if view.warm and view.reward.known:
            reward = view.finite("reward_mean")
            if reward is not None and entropy <= 50:  # exp(H) overflows long before H matters
                self._add_fit_point(entropy, reward)
        return (
            self._collapse(view, rho),
            self._exhausted(view, rho),
            self._blowup(view),
            no_signal,
        )

    def quiet_prefix(self, cols: Columns) -> Quiet:
        th, n, warm = self.th, cols.n, cols.warm
        clear_steps = th["clear_steps"]
        # E5 (every step): the zero-grad share of the window after each step's point.
        grads, window = cols.value("grad_norm"), self.zero_grads
        flags = None if grads is None else np.where(grads == 0.0, 1.0, 0.0)
        share = _share_column(window, flags, n)
        zero_std = cols.smoothed["frac_zero_std"]
        no_groups = _at_least(zero_std, th["no_signal_groups"], n)
        signal = warm & (no_groups | (share >= th["zero_grad_share"]))
        signal_quiet = run_lengths(~signal, self.signal_quiet)
        stops = Stops(self, cols)
        stops.rule("no_learning_signal", signal, WARN, signal_quiet >= clear_steps)
        entropy, rho = cols.value("entropy"), cols.rho
        if entropy is None or rho is None:

            def advance_signal(begin: int, end: int) -> None:
                self._advance_signal(flags, signal_quiet, begin, end)

            return stops.quiet(advance_signal)
        # E1/E2: a severity where rho < spent_ratio and the reward was not bought.
        low_rho = rho < th["spent_ratio"]
        severity = low_rho  # all False while rho stays above spent_ratio
        rank: int | Ints = WARN
        if anywhere(low_rho):
            identical = _at_least(zero_std, th["identical_groups"], n)
            spent = low_rho & (cols.stagnant | (not cols.reward_known))
            unsolved = np.zeros(n, dtype=np.bool_)
            smoothed_reward = cols.smoothed["reward_mean"]
            if cols.reward_known and smoothed_reward is not None:
                ceiling = cols.r_max - th["solved_margin"] * (cols.r_max - cols.r_min)
                unsolved = smoothed_reward < ceiling
            short = _below(cols.length_ratio, th["short_length_ratio"], n)
            severe = identical | short | (rho < th["collapse_ratio"])
            critical = (spent & severe) | (low_rho & identical & unsolved)
            severity = warm & low_rho & (spent | (identical & unsolved))
            rank = np.where(critical, CRITICAL, WARN) - (0 if cols.reward_known else 1)  # capped
        collapse = run_lengths(severity, self.collapse_streak)
        firing = severity & (collapse >= th["persistence"])
        recovered = run_lengths(rho > th["clear_ratio"], self.recovered_streak)
        improving = run_lengths(cols.improving, self.improving_streak)
        clears = (recovered >= clear_steps) | (improving >= clear_steps)
        stops.rule("entropy_collapse", firing, rank, clears)
        # collapse_active: set where E1/E2 fire, dropped where their clear rule holds.
        if self.collapse_active or anywhere(firing):
            index = np.arange(n)
            fired = np.maximum.accumulate(np.where(firing, index, -1))
            settled = np.maximum.accumulate(np.where(clears & ~firing, index, -1))
            active = np.where(fired == settled, self.collapse_active, fired > settled)
        else:  # not active, and nothing sets it
            active = np.zeros(n, dtype=np.bool_)
        # E3: wherever entropy is low outside a collapse, the reward plateau decides (feed()
        # takes the steps where numpy cannot settle it).
        smoothed = cols.smoothed["entropy"]
        assert smoothed is not None
        low = (smoothed < th["exhausted_entropy"]) | (rho < th["exhausted_ratio"])
        exhausted = low & warm & ~active
        if anywhere(exhausted):
            flat, known = cols.plateau(int(th["exhausted_min_points"]), th["exhausted_t_stat"])
            stops.cannot_tell(first(exhausted & ~known))
            exhausted &= flat
        exhausted_streak = run_lengths(exhausted, self.exhausted_streak)
        exhausted_quiet = run_lengths(~exhausted, self.exhausted_quiet)
        groups = _at_least(zero_std, th["exhausted_groups_warn"], n)
        stops.rule(
            "entropy_exhausted",
            exhausted_streak >= th["exhausted_persistence"],
            np.where(groups, WARN, INFO),
            exhausted_quiet >= clear_steps,
        )
        # E4
        start = cols.baselines["entropy"] or 0.0
        limit = max(th["blowup_factor"] * start, start + th["blowup_margin"])
        blowup = warm & (smoothed > limit)
        blowup_streak = run_lengths(blowup, self.blowup_streak)
        blowup_quiet = run_lengths(~blowup, self.blowup_quiet)
        blowup_firing = blowup_streak >= th["blowup_persistence"]
        stops.rule("entropy_blowup", blowup_firing, WARN, blowup_quiet >= clear_steps)
        rewards = cols.value("reward_mean")
        fit = None
        if rewards is not None and cols.reward_known:
            fit = warm & (entropy <= 50)

        def advance(begin: int, end: int) -> None:
            self._advance_signal(flags, signal_quiet, begin, end)
            if fit is not None and rewards is not None:
                taken = fit[begin:end]
                points = zip(
                    entropy[begin:end][taken].tolist(),
                    rewards[begin:end][taken].tolist(),
                    strict=True,
                )
                self._add_fit_points(points)
            last = end - 1
            self.collapse_streak = int(collapse[last])
            self.recovered_streak = int(recovered[last])
            self.improving_streak = int(improving[last])
            self.collapse_active = bool(active[last])
            self.exhausted_streak = int(exhausted_streak[last])
            self.exhausted_quiet = int(exhausted_quiet[last])
            self.blowup_streak, self.blowup_quiet = (
                int(blowup_streak[last]),
                int(blowup_quiet[last]),
            )

        return stops.quiet(advance)

    def _advance_signal(self, flags: Floats | None, quiet: Ints, begin: int, end: int) -> None:
        if flags is not None:
            self.zero_grads.extend(flags[begin:end].tolist())
        self.signal_quiet = int(quiet[end - 1])

    def _facts(self, view: StepView, rho: float) -> dict[str, Any]:
        return {
            "entropy_start": rounded(view.baselines["entropy"]),
            "entropy": rounded(view.smoothed["entropy"]),
            "rho": rounded(rho),
            "zero_std_fraction": rounded(view.smoothed["frac_zero_std"]),
            "length_ratio": rounded(view.length_ratio),
            **view.reward.evidence(),
        }

    def _collapse_severity(self, view: StepView, rho: float) -> Severity | None:
        """E1/E2 at this step, for rho < spent_ratio (both need it)."""
        th, reward = self.th, view.reward
        zero_std = view.smoothed["frac_zero_std"]
        identical = zero_std is not None and zero_std >= th["identical_groups"]
        spent = rho < th["spent_ratio"] and (reward.stagnant or not reward.known)
        length_ratio = view.length_ratio
        severe = (
            identical
            or (length_ratio is not None and length_ratio < th["short_length_ratio"])
            or rho < th["collapse_ratio"]
        )
        smoothed_reward = view.smoothed["reward_mean"]
        unsolved = (
            reward.known
            and smoothed_reward is not None
            and smoothed_reward < reward.r_max - th["solved_margin"] * reward.range
        )
        if (spent and severe) or (rho < th["spent_ratio"] and identical and unsolved):
            return "critical"
        return "warn" if spent else None

    def _collapse(self, view: StepView, rho: float) -> Verdict | None:
        th = self.th
        severity = None
        if view.warm and rho < th["spent_ratio"]:
            severity = self._collapse_severity(view, rho)
        self.collapse_streak = streak = self.collapse_streak + 1 if severity is not None else 0
        self.recovered_streak = recovered = (
            self.recovered_streak + 1 if rho > th["clear_ratio"] else 0
        )
        self.improving_streak = improving = (
            self.improving_streak + 1 if view.reward.improving else 0
        )
        if severity is None or streak < th["persistence"]:
            clears = recovered >= th["clear_steps"] or improving >= th["clear_steps"]
            self.collapse_active = self.collapse_active and not clears
            key = "entropy_collapse"
            return CLEARED[key] if key in self.open_keys and clears else None
        self.collapse_active = True
        reported = capped(severity, not view.reward.known)
        if not view.emits(self.id, "entropy_collapse", reported):
            return None
        facts = self._facts(view, rho)
        if not view.reward.known:
            facts["degraded"] = "no reward logged: cannot tell whether entropy bought reward"
        return Verdict(
            "entropy_collapse",
            reported,
            message=_collapse_message(facts, severity),
            evidence=facts,
            advice=COLLAPSE_ADVICE,
        )

    def _exhausted(self, view: StepView, rho: float) -> Verdict | None:
        th = self.th
        entropy = view.smoothed["entropy"] or 0.0
        low = entropy < th["exhausted_entropy"] or rho < th["exhausted_ratio"]
        # The 50-point reward fit last: only when everything else holds.
        condition = low and view.warm and not self.collapse_active and self._reward_flat(view)
        self.exhausted_streak = streak = self.exhausted_streak + 1 if condition else 0
        self.exhausted_quiet = quiet = 0 if condition else self.exhausted_quiet + 1
        if streak < th["exhausted_persistence"]:
            key = "entropy_exhausted"
            return CLEARED[key] if key in self.open_keys and quiet >= th["clear_steps"] else None
        zero_std = view.smoothed["frac_zero_std"]
        severity: Severity = "info"
        if zero_std is not None and zero_std >= th["exhausted_groups_warn"]:
            severity = "warn"
        if not view.emits(self.id, "entropy_exhausted", severity):
            return None
        facts = self._facts(view, rho)
        ceiling = self._ceiling(view)
        facts["reward_ceiling"] = rounded(ceiling)
        message = (
            f"Entropy is exhausted (H {facts['entropy']} nats, {rho:.0%} of start) and reward "
            "has stopped improving: further gains are unlikely without more exploration."
        )
        if ceiling is not None:
            message += f" Fitted ceiling R = b - a*exp(H) at H=0: b - a ≈ {ceiling:.3g}."
        return Verdict(
            "entropy_exhausted", severity, message=message, evidence=facts, advice=COLLAPSE_ADVICE
        )

    def _reward_flat(self, view: StepView) -> bool:
        """E3's reward plateau: the long trend's t-stat not significant, over enough points."""
        trend, th = view.reward.long_trend, self.th
        return (
            trend is not None
            and trend.points >= th["exhausted_min_points"]
            and trend.t_stat < th["exhausted_t_stat"]
        )

    def _blowup(self, view: StepView) -> Verdict | None:
        th = self.th
        start, entropy = view.baselines["entropy"] or 0.0, view.smoothed["entropy"] or 0.0
        limit = max(th["blowup_factor"] * start, start + th["blowup_margin"])
        condition = view.warm and entropy > limit
        self.blowup_streak = streak = self.blowup_streak + 1 if condition else 0
        self.blowup_quiet = quiet = 0 if condition else self.blowup_quiet + 1
        if streak < th["blowup_persistence"]:
            key = "entropy_blowup"
            return CLEARED[key] if key in self.open_keys and quiet >= th["clear_steps"] else None
        if not view.emits(self.id, "entropy_blowup", "warn"):
            return None
        facts = {"entropy_start": rounded(start), "entropy": rounded(entropy), "limit": limit}
        return Verdict(
            "entropy_blowup",
            "warn",
            message=f"Entropy rising sharply ({start:.3g} -> {entropy:.3g} nats): "
            "over-exploration/gibberish risk.",
            evidence=facts,
            advice=[
                "Check the entropy coefficient (0.01 explodes; 1e-4..1e-3 is typical).",
                "Use token-mean loss aggregation; filter or softly penalise truncated samples.",
            ],
        )

    def _no_signal(self, view: StepView) -> Verdict | None:
        grad = view.finite("grad_norm")
        shares = self.zero_grads
        if grad is not None:
            shares.append(1.0 if grad == 0.0 else 0.0)
        th, zero_std = self.th, view.smoothed["frac_zero_std"]
        no_groups = zero_std is not None and zero_std >= th["no_signal_groups"]
        condition = view.warm and (no_groups or _share(shares) >= th["zero_grad_share"])
        if not condition:
            self.signal_quiet = quiet = self.signal_quiet + 1
            key = "no_learning_signal"
            return CLEARED[key] if key in self.open_keys and quiet >= th["clear_steps"] else None
        self.signal_quiet = 0
        if not view.emits(self.id, "no_learning_signal", "warn"):
            return None
        zero_share = _share(shares)
        return Verdict(
            "no_learning_signal",
            "warn",
            message=f"Batches carry no gradient: grad norm exactly 0 on {zero_share:.0%} of the "
            f"last points, {zero_std or 0:.0%} of groups have all-equal rewards.",
            evidence={"zero_grad_share": zero_share, "zero_std_fraction": rounded(zero_std)},
            advice=["Filter zero-std groups (dynamic sampling, DAPO) or adjust the data mix."],
        )

    def _add_fit_points(self, points: Iterable[tuple[float, float]]) -> None:
        """_add_fit_point for each (entropy, reward) in order, the sums kept in locals."""
        n, sx, sy, sxx, sxy = self.fit_sums
        for entropy, reward in points:
            x = 2.718281828459045**entropy
            n, sx, sy, sxx, sxy = n + 1, sx + x, sy + reward, sxx + x * x, sxy + x * reward
        self.fit_sums = [n, sx, sy, sxx, sxy]

    def _add_fit_point(self, entropy: float, reward: float) -> None:
        x = 2.718281828459045**entropy
        n, sx, sy, sxx, sxy = self.fit_sums
        self.fit_sums = [n + 1, sx + x, sy + reward, sxx + x * x, sxy + x * reward]

    def _ceiling(self, view: StepView) -> float | None:
        """b - a of R = b - a*exp(H), only once reward has risen enough for the fit to mean much."""
        gain = view.reward.gain
        if gain is None or gain < self.th["ceiling_min_gain"] * view.reward.range:
            return None
        n, sx, sy, sxx, sxy = self.fit_sums
        denominator = n * sxx - sx * sx
        if n < 5 or denominator <= 0:
            return None
        slope = (n * sxy - sx * sy) / denominator  # = -a
        intercept = (sy - slope * sx) / n  # = b
        return intercept + slope


def _at_least(column: Floats | None, limit: float, n: int) -> Bools:
    """`value is not None and value >= limit` after each step."""
    return np.zeros(n, dtype=np.bool_) if column is None else column >= limit


def _below(column: Floats | None, limit: float, n: int) -> Bools:
    """`value is not None and value < limit` after each step."""
    return np.zeros(n, dtype=np.bool_) if column is None else column < limit


def _share_column(window: Window, flags: Floats | None, n: int) -> Floats:
    """_share(window) after each step, the step's flag (1.0 for a zero grad norm) pushed."""
    if flags is None:
        return np.full(n, _share(window))
    marks = flags == 1.0
    if not anywhere(marks) and 1.0 not in window:  # no zero grad norm anywhere: 0 throughout
        return np.zeros(n)
    marked = np.array(window, dtype=np.float64) == 1.0
    shares, counts = window_shares(marked, marks, window.maxlen or 0)
    return np.where(counts >= 5, shares, 0.0)


def _share(zero_grads: Window) -> float:
    """Share of exactly-zero grad norms among the last points (0 before 5 points)."""
    return sum(zero_grads) / len(zero_grads) if len(zero_grads) >= 5 else 0.0


def _collapse_message(facts: dict[str, Any], severity: Severity) -> str:
    label = "Entropy collapse" if severity == "critical" else "Entropy spent, no reward bought"
    zero_std = facts["zero_std_fraction"]
    groups = "" if zero_std is None else f" {zero_std:.0%} of groups now have identical rewards."
    return (
        f"{label}: policy entropy fell to {facts['rho']:.0%} of its start "
        f"({facts['entropy_start']} -> {facts['entropy']} nats) while reward gained only "
        f"{facts['reward_gain']}.{groups} Mechanism: updates that raise already-likely tokens "
        "shrink entropy (ΔH ≈ -Cov(log π, Δz))."
    )
