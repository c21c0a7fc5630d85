"""What the rollouts themselves say (docs/detectors-samples.md): degenerate responses, loops,
and the entropy and length blow-ups they explain.

The hook reads each step's samples into two signals (and a truncation share that stands in for
``response_clip_ratio`` when the trainer logs none): ``sample_degenerate``, the share of empty
or malformed responses, and ``sample_repetition``, their mean seq-rep-4. Both are smoothed and
compared with the run's own start here, so a task whose answers repeat by nature is not
mistaken for a loop.
"""

from __future__ import annotations

from rlguard_backend.stability.events import Severity
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.primitives import Baseline, rounded
from rlguard_backend.stability.rules import Detector, Facts, Rule

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
    reads = frozenset(TEXT_SIGNALS)

    def start(self) -> None:
        """The text signals' EMAs and start values."""
        # EMAs (plain values) and starts (primitives) each in attributes of their own: a
        # detector's state is its attributes
        self.smoothed: dict[str, float | None] = dict.fromkeys(TEXT_SIGNALS)
        self.degenerate_start = Baseline()
        self.repetition_start = Baseline()
        self._starts = {
            "sample_degenerate": self.degenerate_start,
            "sample_repetition": self.repetition_start,
        }

    needs = ((set(TEXT_SIGNALS), "no samples logged with responses: disabled"),)

    def observe(self, view: StepView) -> bool:
        """Smooth the text signals and take their starts; False before warmup."""
        half_life = self.thresholds["half_life"]
        for name in TEXT_SIGNALS:
            value = view.finite(name)
            if value is None:
                continue
            current = self.smoothed[name]
            alpha = 1.0 - 2.0 ** (-1.0 / half_life)
            self.smoothed[name] = value if current is None else current + alpha * (value - current)
            self._starts[name].update(view.step, value)
        return view.warm

    def _level(self, name: str) -> float:
        return self.smoothed[name] or 0.0

    def _risen(self, name: str, level: str) -> bool:
        """Above ``level`` and ``rise`` above the run's own start."""
        start = self._starts[name].value
        current = self._level(name)
        return (
            start is not None
            and current >= self.thresholds[level]
            and (current - start >= self.thresholds["rise"])
        )

    def _text_broken(self) -> bool:
        return self._risen("sample_degenerate", "degenerate_warn") or self._risen(
            "sample_repetition", "repetition_warn"
        )

    def _degenerate(self, view: StepView) -> Severity | None:
        if not self._risen("sample_degenerate", "degenerate_warn"):
            return None
        critical = self._level("sample_degenerate") >= self.thresholds["degenerate_critical"]
        return "critical" if critical else "warn"

    def _loops(self, view: StepView) -> Severity | None:
        return "warn" if self._risen("sample_repetition", "repetition_loops") else None

    def _gibberish(self, view: StepView) -> Severity | None:
        rho = view.rho
        if rho is None or rho <= self.thresholds["entropy_rise"] or not self._text_broken():
            return None
        critical = self._level("sample_degenerate") >= self.thresholds["degenerate_critical"]
        return "critical" if critical else "warn"

    def _long_loops(self, view: StepView) -> Severity | None:
        ratio, truncated = view.length_ratio, view.smoothed["response_clip_ratio"]
        th = self.thresholds
        if ratio is None or ratio <= th["length_rise"] or truncated is None:
            return None
        if truncated <= th["truncation"] or not self._risen("sample_repetition", "repetition_warn"):
            return None
        return "critical" if truncated > th["truncation_critical"] else "warn"

    def _facts(self, view: StepView) -> Facts:
        facts: Facts = {}
        for name in TEXT_SIGNALS:
            facts[name] = rounded(self.smoothed[name])
            facts[f"{name}_start"] = rounded(self._starts[name].value)
        return facts

    def _describe_degenerate(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        share = self._level("sample_degenerate")
        start = self._starts["sample_degenerate"].value or 0.0
        message = (
            f"{share:.0%} of the responses are empty or malformed (at the start: {start:.0%}) "
            "— the policy's output is breaking down."
        )
        return message, self._facts(view)

    def _describe_loops(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        rate = self._level("sample_repetition")
        start = self._starts["sample_repetition"].value or 0.0
        message = (
            f"Responses repeat themselves: {rate:.0%} of their word 4-grams are repeats "
            f"(at the start: {start:.0%}; human text ≈ 1 %) — the policy is looping."
        )
        return message, self._facts(view)

    def _describe_gibberish(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        said = []
        if self.smoothed["sample_degenerate"] is not None:
            said.append(
                f"{self._level('sample_degenerate'):.0%} of the responses are empty or malformed"
            )
        if self.smoothed["sample_repetition"] is not None:
            said.append(f"{self._level('sample_repetition'):.0%} of their 4-grams repeat")
        message = (
            f"Entropy ×{view.rho or 0.0:.3g} vs start while {' and '.join(said)} — the rise "
            "is gibberish, not exploration."
        )
        return message, {"entropy_ratio": rounded(view.rho), **self._facts(view)}

    def _describe_long_loops(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        ratio, truncated = view.length_ratio or 0.0, view.smoothed["response_clip_ratio"] or 0.0
        message = (
            f"Response length ×{ratio:.3g} vs start with {truncated:.0%} truncated, and "
            f"{self._level('sample_repetition'):.0%} of their 4-grams repeat — the extra "
            "length is loops running into the length limit."
        )
        facts = {"length_ratio": rounded(ratio), "truncated_fraction": rounded(truncated)}
        return message, {**facts, **self._facts(view)}

    rules = (
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
