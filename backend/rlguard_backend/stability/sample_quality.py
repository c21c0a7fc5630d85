"""What the rollouts themselves say (docs/detectors-samples.md): degenerate responses, loops,
and the entropy and length blow-ups they explain.

The hook reads each step's samples into two signals (and a truncation share that stands in for
``response_clip_ratio`` when the trainer logs none): ``sample_degenerate``, the share of empty
or malformed responses, and ``sample_repetition``, their mean seq-rep-4. Both are smoothed with
the other signals (observations.py) and compared with the run's own start, so a task whose
answers repeat by nature is not mistaken for a loop.
"""

from __future__ import annotations

from typing import ClassVar

from rlguard_backend.stability.events import Severity
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.primitives import rounded, times
from rlguard_backend.stability.rules import Detector, Facts, Need, Rule

TEXT_SIGNALS = ("sample_degenerate", "sample_repetition")
SAMPLES_ADVICE = [
    "Open the samples of these steps (worst reward first) and read what the policy writes.",
]
GIBBERISH_ADVICE = [
    *SAMPLES_ADVICE,
    "Lower or drop the entropy bonus; an entropy bonus pushes mass onto junk tokens "
    "(DETECTORS.md S2 §10.6).",
    "Roll back to the last checkpoint before the rise if the format reward is falling.",
]
LOOP_ADVICE = [
    *SAMPLES_ADVICE,
    "Penalise overlong responses (DAPO soft overlong punishment) or filter truncated samples.",
    "Check the sampling settings of the rollout engine (temperature, repetition penalty).",
]


class SampleQuality(Detector):
    """Degenerate and looping responses, and entropy or length rises they explain."""

    id = "sample_quality"
    reads = Need(frozenset(TEXT_SIGNALS), "no samples logged with responses: disabled")

    def observe(self, view: StepView) -> bool:
        """Nothing to judge before warmup (the text signals are smoothed with the others)."""
        return view.warm

    def _risen(self, view: StepView, name: str, level: str) -> bool:
        """Above ``level`` and ``rise`` above the run's own start."""
        start, current = view.baselines[name], _level(view, name)
        return (
            start is not None
            and current >= self.thresholds[level]
            and (current - start >= self.thresholds["rise"])
        )

    def _text_broken(self, view: StepView) -> bool:
        return self._risen(view, "sample_degenerate", "degenerate_warn") or self._risen(
            view, "sample_repetition", "repetition_warn"
        )

    def _degenerate(self, view: StepView) -> Severity | None:
        if not self._risen(view, "sample_degenerate", "degenerate_warn"):
            return None
        critical = _level(view, "sample_degenerate") >= self.thresholds["degenerate_critical"]
        return "critical" if critical else "warn"

    def _loops(self, view: StepView) -> Severity | None:
        return "warn" if self._risen(view, "sample_repetition", "repetition_loops") else None

    def _gibberish(self, view: StepView) -> Severity | None:
        rho = view.rho
        if rho is None or rho <= self.thresholds["entropy_rise"] or not self._text_broken(view):
            return None
        critical = _level(view, "sample_degenerate") >= self.thresholds["degenerate_critical"]
        return "critical" if critical else "warn"

    def _long_loops(self, view: StepView) -> Severity | None:
        ratio, truncated = view.length_ratio, view.smoothed["response_clip_ratio"]
        thresholds = self.thresholds
        if ratio is None or ratio <= thresholds["length_rise"] or truncated is None:
            return None
        if truncated <= thresholds["truncation"] or not self._risen(
            view, "sample_repetition", "repetition_warn"
        ):
            return None
        return "critical" if truncated > thresholds["truncation_critical"] else "warn"

    def _facts(self, view: StepView) -> Facts:
        facts: Facts = {}
        for name in TEXT_SIGNALS:
            facts[name] = rounded(view.smoothed[name])
            facts[f"{name}_start"] = rounded(view.baselines[name])
        return facts

    def _describe_degenerate(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        share = _level(view, "sample_degenerate")
        start = view.baselines["sample_degenerate"] or 0.0
        message = (
            f"{share:.0%} of the responses are empty or malformed (at the start: {start:.0%}) "
            "— the policy's output is breaking down."
        )
        return message, self._facts(view)

    def _describe_loops(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        rate = _level(view, "sample_repetition")
        start = view.baselines["sample_repetition"] or 0.0
        message = (
            f"Responses repeat themselves: {rate:.0%} of their word 4-grams are repeats "
            f"(at the start: {start:.0%}; human text ≈ 1 %) — the policy is looping."
        )
        return message, self._facts(view)

    def _describe_gibberish(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        said = []
        if view.smoothed["sample_degenerate"] is not None:
            said.append(
                f"{_level(view, 'sample_degenerate'):.0%} of the responses are empty or malformed"
            )
        if view.smoothed["sample_repetition"] is not None:
            said.append(f"{_level(view, 'sample_repetition'):.0%} of their 4-grams repeat")
        message = (
            f"Entropy at {times(view.rho or 0.0)} its start while {' and '.join(said)} — the rise "
            "is gibberish, not exploration."
        )
        return message, {"entropy_ratio": rounded(view.rho), **self._facts(view)}

    def _describe_long_loops(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        ratio, truncated = view.length_ratio or 0.0, view.smoothed["response_clip_ratio"] or 0.0
        message = (
            f"Response length at {times(ratio)} its start with {truncated:.0%} truncated, and "
            f"{_level(view, 'sample_repetition'):.0%} of their 4-grams repeat — the extra "
            "length is loops running into the length limit."
        )
        facts = {"length_ratio": rounded(ratio), "truncated_fraction": rounded(truncated)}
        return message, {**facts, **self._facts(view)}

    rules: ClassVar[tuple[Rule[SampleQuality], ...]] = (
        Rule(
            "degenerate_responses",
            signals=("sample_degenerate",),
            fires=_degenerate,
            persistence="persistence",
            describe=_describe_degenerate,
            advice=SAMPLES_ADVICE,
        ),
        Rule(
            "repetition_loops",
            signals=("sample_repetition",),
            fires=_loops,
            persistence="persistence",
            describe=_describe_loops,
            advice=LOOP_ADVICE,
        ),
        Rule(
            "entropy_gibberish",
            signals=("entropy", "sample_degenerate", "sample_repetition"),
            fires=_gibberish,
            persistence="persistence",
            describe=_describe_gibberish,
            advice=GIBBERISH_ADVICE,
        ),
        Rule(
            "length_loops",
            signals=("response_length", "response_clip_ratio", "sample_repetition"),
            fires=_long_loops,
            persistence="persistence",
            describe=_describe_long_loops,
            advice=LOOP_ADVICE,
        ),
    )


def _level(view: StepView, name: str) -> float:
    """The smoothed text signal `name` (0 before its first point)."""
    return view.smoothed[name] or 0.0
