"""Rules, each declared once, and the Detector that runs its rules step by step.

A Rule is one alert key: the condition that fires it and how loud (``fires``), how many steps
in a row it must hold (``persistence``), the clear rule that resolves its open alert
(``clears``, held ``clear_steps`` steps in a row), what it says (``describe``) and what to try
(``advice``). Its callables take the detector that declares it: ``Rule[D]`` types them, so
mypy checks a rule against its detector's attributes. Detector.evaluate is the one place where a
rule's streaks are counted and where it opens, refreshes or clears its alert; a detector only
folds each step into the state its rules read (``observe``).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from rlguard_backend.stability.context import RunContext
from rlguard_backend.stability.events import Severity, Verdict, slot_of
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.primitives import json_safe
from rlguard_backend.stability.thresholds import Thresholds

Facts = dict[str, Any]
D = TypeVar("D", bound="Detector")  # the detector a rule belongs to
Condition = Callable[[D, StepView], bool]  # (detector, view): whether it holds this step


@dataclass(frozen=True)
class Rule(Generic[D]):
    """One alert key of a detector, declared once (see the module docstring)."""

    key: str
    signals: tuple[str, ...]  # the canonical signals it reads (what it watches, for readers)
    fires: Callable[[D, StepView], Severity | None]  # (detector, view): severity, or None
    describe: Callable[[D, StepView, Severity], tuple[str, Facts]]  # message, evidence
    advice: Sequence[str] | Callable[[D, Severity], Sequence[str]]  # (detector, severity)
    persistence: str | int = 1  # steps in a row `fires` must hold: a threshold name or a count
    # The clear rule: any of these conditions held clear_steps steps in a row (each counted on
    # its own); none: `fires` does not hold.
    clears: tuple[Condition[D], ...] = ()
    clear_steps: str | int = "clear_steps"
    applies: Condition[D] | None = None  # the steps it runs at (None: all)
    # Whether it can fire at all in this run (detector -> bool, asked once, from the run
    # context); a rule that cannot never runs. None: it always can.
    enabled: Callable[[D], bool] | None = None
    # While its alert is open at CRITICAL, every other alert raised is secondary to it (D1's
    # non-finite statistics: the parameters are probably corrupted, the rest follows).
    primary: bool = False


@dataclass(frozen=True)
class Need:
    """Signals a detector needs, and what missing() says when a run logged none of them."""

    signals: frozenset[str]
    why: str


def never(detector: object, view: StepView) -> bool:
    """The clear condition of an alert that stays open once raised (it fires once)."""
    return False


NEVER = (never,)


class RuleProgress:
    """A rule's streaks: steps in a row it fired, and steps in a row its clear rule held (each
    condition's own streak in `condition_streaks` when it has several); `active` from the step
    it fires until its clear rule resolves it."""

    __slots__ = (
        "active",
        "clear_steps",
        "clear_streak",
        "condition_streaks",
        "persistence",
        "rule",
        "slot",
        "streak",
    )

    def __init__(self, rule: Rule[Any], slot: str, count: Callable[[str | int], float]) -> None:
        self.streak, self.clear_streak, self.active = 0, 0, False
        self.condition_streaks = [0] * len(rule.clears) if len(rule.clears) > 1 else None
        # Settings: the rule, where its open alert is kept, the steps in a row it must fire and
        # its clear rule must hold (`count` reads a threshold name).
        self.rule, self.slot = rule, slot
        self.persistence, self.clear_steps = count(rule.persistence), count(rule.clear_steps)

    def one_condition_held(self, detector: Detector, view: StepView) -> bool:
        """Count each clear condition's streak at this step; whether one is clear_steps long."""
        streaks = self.condition_streaks
        assert streaks is not None
        for index, condition in enumerate(self.rule.clears):
            streaks[index] = streaks[index] + 1 if condition(detector, view) else 0
        return max(streaks) >= self.clear_steps

    def dump(self) -> list[Any]:
        """[streak, clear_streak, active, condition_streaks], as JSON takes it."""
        return [
            self.streak,
            self.clear_streak,
            self.active,
            self.condition_streaks and list(self.condition_streaks),
        ]

    def load(self, state: list[Any]) -> None:
        """Continue from a dump()ed state."""
        self.streak, self.clear_streak, self.active, condition_streaks = state
        self.condition_streaks = condition_streaks and list(condition_streaks)


_CONFIG_ATTRIBUTES = frozenset({"context", "thresholds", "open_keys", "progress"})


# What evaluate() reads for one rule at every step (Detector._plan): applies, fires, the clear
# condition (None: `fires` does not hold), its RuleProgress and clear_steps. A plain tuple:
# evaluate() unpacks one per rule per step, and a tuple subclass unpacks ~3x slower.
_RuleStep = tuple[
    Condition[Any] | None,
    Callable[[Any, StepView], Severity | None],
    Condition[Any] | None,
    RuleProgress,
    float,
]


class Detector:
    """One detector of DETECTORS.md §3: its rules, and the streaming state they read.

    Everything a subclass stores on ``self`` (other than the settings above) is its state:
    primitives from primitives.py or plain JSON values. Attributes named ``_*`` are settings or
    caches derived from the thresholds, the context or that state: never dumped.
    """

    id: ClassVar[str]
    rules: ClassVar[tuple[Rule[Any], ...]]
    # The signals it judges: a step that logs none of them is skipped, and a run that logged
    # none of them is told why (missing()). None: it runs at every step (some of its rules
    # count steps without their signal).
    reads: ClassVar[Need | None] = None
    # Then the first of these the run logged none of says why it is degraded (missing()).
    needs: ClassVar[tuple[Need, ...]] = ()
    # (RunContext field, why): then the first of these the run config left unset says why.
    needs_context: ClassVar[tuple[tuple[str, str], ...]] = ()

    def __init__(
        self, context: RunContext, thresholds: Thresholds, open_keys: set[str] | None = None
    ) -> None:
        self.context = context
        self.thresholds = thresholds
        # Keys of this detector's open alerts, kept up to date by the suite's AlertBook.
        self.open_keys: set[str] = set() if open_keys is None else open_keys
        self.progress = {
            rule.key: RuleProgress(rule, slot_of(self.id, rule.key), self._count)
            for rule in self.rules
        }
        self.start()
        # Per rule that can fire in this run, what evaluate() reads at every step.
        self._steps = [
            self._plan(rule) for rule in self.rules if rule.enabled is None or rule.enabled(self)
        ]

    def start(self) -> None:
        """Set the state before the first step (its thresholds and context are set)."""

    def observe(self, view: StepView) -> bool:
        """Fold this step into the state the rules read; False: nothing to judge this step."""
        return True

    def evaluate(self, view: StepView) -> tuple[Verdict, ...]:
        """What the rules say at this step: a Verdict where one fires (and would emit), and
        a cleared one where its clear rule resolves its open alert."""
        if not self.observe(view):
            return ()
        verdicts: tuple[Verdict, ...] = ()  # usually nothing fires or clears
        for applies, fires, clears, progress, clear_steps in self._steps:
            if applies is not None and not applies(self, view):
                continue
            severity = fires(self, view)
            clear_holds = severity is None if clears is None else clears(self, view)
            progress.clear_streak = progress.clear_streak + 1 if clear_holds else 0
            if severity is None:
                progress.streak = 0
            else:
                progress.streak += 1
                if progress.streak >= progress.persistence:
                    progress.active = True
                    if view.change(progress.slot, severity) is not None:
                        verdicts = (*verdicts, self._verdict(progress.rule, view, severity))
                    continue
            # An active rule's alert is open (it opens on the step the rule turns active): its
            # clear rule, held clear_steps in a row, resolves it.
            if progress.active and progress.clear_streak >= clear_steps:
                progress.active = False
                if progress.rule.key in self.open_keys:
                    verdicts = (*verdicts, Verdict(progress.rule.key))
        return verdicts

    def missing(self, seen: frozenset[str]) -> str | None:
        """Why this detector is degraded or disabled, or None when it runs fully."""
        needs = self.needs if self.reads is None else (self.reads, *self.needs)
        unlogged = (need.why for need in needs if seen.isdisjoint(need.signals))
        unset = (why for field, why in self.needs_context if getattr(self.context, field) is None)
        return next(unlogged, None) or next(unset, None)

    def dump(self) -> dict[str, Any]:
        """The detector's state (its non-setting attributes and rule streaks), JSON-safe."""
        state = {name: _dump(value) for name, value in vars(self).items() if _is_state(name)}
        state["progress"] = {key: progress.dump() for key, progress in self.progress.items()}
        return state

    def load(self, state: dict[str, Any]) -> None:
        """Continue from a dump()ed state."""
        for key, progress in state["progress"].items():
            self.progress[key].load(progress)
        for name, value in state.items():
            if name != "progress":
                setattr(self, name, _load(getattr(self, name, None), value))

    def _plan(self, rule: Rule[Any]) -> _RuleStep:
        """What evaluate() reads for `rule` at every step. With several clear conditions, its
        clear rule is "one condition held clear_steps in a row" (each counted by its
        RuleProgress), held once; a rule that never clears has no clear condition to test."""
        progress = self.progress[rule.key]
        clears, clear_steps = rule.clears[0] if rule.clears else None, progress.clear_steps
        if rule.clears == NEVER:
            clears, clear_steps = None, math.inf
        elif len(rule.clears) > 1:
            clears, clear_steps = progress.one_condition_held, 1
        return rule.applies, rule.fires, clears, progress, clear_steps

    def _count(self, limit: str | int) -> int | float:
        return self.thresholds[limit] if isinstance(limit, str) else limit

    def _verdict(self, rule: Rule[Any], view: StepView, severity: Severity) -> Verdict:
        message, evidence = rule.describe(self, view, severity)
        advice = rule.advice(self, severity) if callable(rule.advice) else rule.advice
        return Verdict(rule.key, severity, message=message, evidence=evidence, advice=list(advice))


def _is_state(name: str) -> bool:
    return name not in _CONFIG_ATTRIBUTES and not name.startswith("_")


def _dump(value: Any) -> Any:
    """A state attribute as JSON takes it: a copy, with non-finite floats as strings."""
    if type(value) is int or value is None:
        return value
    if hasattr(value, "dump"):  # a primitive
        return value.dump()
    if isinstance(value, dict):
        return {key: _dump(item) for key, item in value.items()}
    if isinstance(value, (float, list, tuple)):
        return json_safe(value)
    return value  # bool, str


def _load(current: Any, state: Any) -> Any:
    """Load `state` into the primitive `current`; plain values are replaced."""
    if hasattr(current, "load"):  # a primitive
        current.load(state)
        return current
    return copy.deepcopy(state)
