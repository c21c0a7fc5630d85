"""D8: reward-hacking hints from response length (DETECTORS.md §3 D8).

Alert keys: ``length_blowup`` (WARN: length > 2x start, > 10 % truncated and truncation up
> 5 points in 20 steps, reward not improving, P=5; CRITICAL once > 50 % truncated; clears after
10 points below 2x or 10 % truncated), ``length_collapse`` (WARN: length < 0.3x start, P=5),
``entropy_length_rise`` (INFO: entropy and length both > 1.5x their start, P=5).
The spec's "KL jumping with one reward component" hint needs per-component rewards, which no
canonical signal carries yet.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rlguard_backend.stability.base import Detector, Stops, capped
from rlguard_backend.stability.columns import (
    NOT_QUIET,
    Columns,
    Floats,
    Ints,
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

INFO, WARN, CRITICAL = SEVERITY_RANK["info"], SEVERITY_RANK["warn"], SEVERITY_RANK["critical"]
LENGTH_ADVICE = [
    "Inspect samples for repetition, gibberish or reward hacking.",
    "Use token-level loss aggregation, overlong filtering or a soft overlong penalty (DAPO).",
]


class LengthHacking(Detector):
    """D8: responses blowing up into truncation, or collapsing to nothing."""

    id = "length"
    keys = ("length_blowup", "length_collapse", "entropy_length_rise")
    reads = frozenset({"response_length"})

    def __init__(
        self, context: RunContext, thresholds: Thresholds, open_keys: set[str] | None = None
    ) -> None:
        super().__init__(context, thresholds, open_keys)
        self.truncation_history = Lookback(int(thresholds["rise_lookback_steps"]))
        self.streaks = dict.fromkeys(self.keys, 0)
        self.quiet = dict.fromkeys(self.keys, 0)

    def missing(self, seen: frozenset[str]) -> str | None:
        if "response_length" not in seen:
            return "no response length logged: disabled"
        if "response_clip_ratio" not in seen:
            return "no truncation ratio logged: blow-up rule disabled"
        return None

    def evaluate(self, view: StepView) -> Sequence[Verdict | None]:
        ratio = view.length_ratio
        if view.finite("response_length") is None or ratio is None:
            return ()
        truncated = view.smoothed["response_clip_ratio"]
        if view.finite("response_clip_ratio") is not None and truncated is not None:
            self.truncation_history.push(view.step, truncated)
        return (
            self._blowup(view, ratio, truncated),
            self._collapse(view, ratio),
            self._entropy_rise(view, ratio),
        )

    def quiet_prefix(self, cols: Columns) -> Quiet:
        th, n, warm = self.th, cols.n, cols.warm
        ratio = cols.length_ratio
        if cols.value("response_length") is None or ratio is None:
            return silent(n)
        truncated = cols.smoothed["response_clip_ratio"]
        lag = th["rise_lookback_steps"]
        logged = cols.value("response_clip_ratio") is not None
        if (truncated is not None and not logged) or not integral(lag):
            return NOT_QUIET  # a truncation EMA with no new points: left to feed()
        factor, rho = th["rise_factor"], cols.rho
        longest, shortest = float(ratio.max()), float(ratio.min())
        if (
            longest <= th["blowup_factor"]
            and shortest >= th["collapse_factor"]
            and (longest <= factor or rho is None or float(rho.max()) <= factor)
        ):
            return self._far_from_every_rule(cols, truncated)
        streaks, quiet = {}, {}
        if truncated is None:
            long = np.zeros(n, dtype=np.bool_)
            condition = long
        else:
            long = ratio > th["blowup_factor"]
            before, known = ago(self.truncation_history, cols.steps, truncated, lag)
            rising = known & (truncated - before > th["truncation_rise"])
            condition = warm & long & (truncated > th["truncation"]) & rising & ~cols.improving
        key = "length_blowup"
        streaks[key] = run_lengths(condition, self.streaks[key])
        settled = ~long if truncated is None else ~long | (truncated < th["truncation"])
        quiet[key] = run_lengths(settled, self.quiet[key])
        short = ratio < th["collapse_factor"]
        key = "length_collapse"
        streaks[key], quiet[key] = (
            run_lengths(warm & short, self.streaks[key]),
            run_lengths(~short, self.quiet[key]),
        )
        both = np.zeros(n, dtype=np.bool_)
        if rho is not None:
            both = (rho > factor) & (ratio > factor)
        key = "entropy_length_rise"
        streaks[key], quiet[key] = (
            run_lengths(warm & both, self.streaks[key]),
            run_lengths(~both, self.quiet[key]),
        )
        ranks: dict[str, int | Ints] = {"length_collapse": WARN, "entropy_length_rise": INFO}
        ranks["length_blowup"] = WARN
        if truncated is not None:
            ranks["length_blowup"] = np.where(truncated > th["truncation_critical"], CRITICAL, WARN)
        if not cols.reward_known:  # capped
            ranks["length_blowup"] = ranks["length_blowup"] - 1
        stops = Stops(self, cols)
        for key in self.keys:
            firing, settled = streaks[key] >= th["persistence"], quiet[key] >= th["clear_steps"]
            stops.rule(key, firing, ranks[key], settled)

        def advance(begin: int, end: int) -> None:
            if truncated is not None:
                push_points(
                    self.truncation_history, cols.step_list[begin:end], truncated[begin:end]
                )
            for key in self.keys:
                self.streaks[key], self.quiet[key] = (
                    int(streaks[key][end - 1]),
                    int(quiet[key][end - 1]),
                )

        return stops.quiet(advance)

    def _far_from_every_rule(self, cols: Columns, truncated: Floats | None) -> Quiet:
        """quiet_prefix where the length ratio stays between the collapse and blow-up factors
        (and below the rise factor, or entropy does): no condition holds at any step, so every
        streak resets and every clear rule counts on; only an open alert's clearing speaks."""
        quiet = self.quiet
        stops = Stops(self, cols)
        for key in self.keys:
            stops.clears(key, quiet[key])

        def advance(begin: int, end: int) -> None:
            if truncated is not None:
                push_points(
                    self.truncation_history, cols.step_list[begin:end], truncated[begin:end]
                )
            for key in self.keys:
                self.streaks[key], quiet[key] = 0, quiet[key] + end - begin

        return stops.quiet(advance)

    def _blowup(self, view: StepView, ratio: float, truncated: float | None) -> Verdict | None:
        th = self.th
        long = ratio > th["blowup_factor"] and truncated is not None
        condition = (
            view.warm
            and long
            and (truncated or 0.0) > th["truncation"]
            and self._rising(view.step, truncated)
            and not view.reward.improving
        )
        # Each rule: a streak of its condition, and points in a row its clear rule held.
        streaks, quiet, key = self.streaks, self.quiet, "length_blowup"
        streaks[key] = streak = streaks[key] + 1 if condition else 0
        settled = not long or (truncated or 0.0) < th["truncation"]
        quiet[key] = calm = quiet[key] + 1 if settled else 0
        if streak < th["persistence"]:
            return CLEARED[key] if key in self.open_keys and calm >= th["clear_steps"] else None
        before = self.truncation_history.ago(view.step, th["rise_lookback_steps"])
        severity: Severity = (
            "critical" if (truncated or 0.0) > th["truncation_critical"] else "warn"
        )
        reported = capped(severity, not view.reward.known)
        if not view.emits(self.id, "length_blowup", reported):
            return None
        facts = {
            "length_ratio": rounded(ratio),
            "truncated_fraction": rounded(truncated),
            "truncated_fraction_before": rounded(before),
            **view.reward.evidence(),
        }
        if not view.reward.known:
            facts["degraded"] = "no reward logged: cannot tell if length bought reward"
        return Verdict(
            "length_blowup",
            reported,
            message=f"Response length ×{ratio:.3g} vs start with {truncated or 0:.0%} truncated "
            "and no reward gain — possible reward hacking/degeneration.",
            evidence=facts,
            advice=LENGTH_ADVICE,
        )

    def _rising(self, step: int, truncated: float | None) -> bool:
        """Truncation up by more than truncation_rise over rise_lookback_steps."""
        before = self.truncation_history.ago(step, self.th["rise_lookback_steps"])
        return (
            truncated is not None
            and before is not None
            and truncated - before > self.th["truncation_rise"]
        )

    def _collapse(self, view: StepView, ratio: float) -> Verdict | None:
        th, streaks, quiet = self.th, self.streaks, self.quiet
        short = ratio < th["collapse_factor"]
        key = "length_collapse"
        streaks[key] = streak = streaks[key] + 1 if view.warm and short else 0
        quiet[key] = calm = 0 if short else quiet[key] + 1
        if streak < th["persistence"]:
            return CLEARED[key] if key in self.open_keys and calm >= th["clear_steps"] else None
        if not view.emits(self.id, "length_collapse", "warn"):
            return None
        return Verdict(
            "length_collapse",
            "warn",
            message=f"Responses collapsed to {ratio:.0%} of their starting length "
            f"({view.smoothed['response_length']:.3g} tokens) — degeneration or a reward that "
            "pays for brevity.",
            evidence={"length_ratio": rounded(ratio), **view.reward.evidence()},
            advice=LENGTH_ADVICE,
        )

    def _entropy_rise(self, view: StepView, ratio: float) -> Verdict | None:
        th, streaks, quiet, entropy_ratio = self.th, self.streaks, self.quiet, view.rho
        factor = th["rise_factor"]
        both = entropy_ratio is not None and entropy_ratio > factor and ratio > factor
        key = "entropy_length_rise"
        streaks[key] = streak = streaks[key] + 1 if view.warm and both else 0
        quiet[key] = calm = 0 if both else quiet[key] + 1
        if streak < th["persistence"]:
            return CLEARED[key] if key in self.open_keys and calm >= th["clear_steps"] else None
        if not view.emits(self.id, "entropy_length_rise", "info"):
            return None
        return Verdict(
            "entropy_length_rise",
            "info",
            message=f"Entropy (×{entropy_ratio:.3g}) and length (×{ratio:.3g}) are rising "
            "together: watch for gibberish and repetition.",
            evidence={"entropy_ratio": rounded(entropy_ratio), "length_ratio": rounded(ratio)},
            advice=LENGTH_ADVICE[:1],
        )
