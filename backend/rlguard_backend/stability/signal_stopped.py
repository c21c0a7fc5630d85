"""A signal the run logged for a while that stops arriving while the run goes on.

verl's separate-async trainer runs in bypass mode, which never computes
``training/rollout_probs_diff_*`` or the engine-trainer correlation (verl PR 7196); NeMo-RL's
SingleController path dropped ``avg_trajectory_age`` without a word (NeMo-RL#3758). The detectors
that read such a signal go quiet, which reads as healthy. A canonical signal has stopped when

- it arrived at ``min_points`` steps or more (the run logged it for a while),
- none of the last ``absent_points`` steps fed carried it (the run goes on: other keys came),
- and its absence is longer than ``cadence_factor`` x the widest gap between its own points so
  far: a key logged every 50 steps is judged on 50 steps, a bursty one on its widest burst gap,
- before ``planned_steps``, when the run config gives it (what a run logs past its planned end,
  such as a final evaluation, is not training).

A stopped signal of a stability family (``signals.STABILITY_FAMILIES``) is a WARN, any other an
INFO; both clear as soon as the signals come back. Runs repeat one set of keys step after step,
so the bookkeeping is done when that set changes: an ordinary step costs one comparison.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rlguard_backend.signals import FAMILY_OF, SIGNAL_NAMES
from rlguard_backend.stability.events import Severity
from rlguard_backend.stability.observations import StepView
from rlguard_backend.stability.rules import Detector, Facts, Rule

STOPPED_ADVICE = [
    "Check what changed at that step: a mode switch can drop a whole family (verl's "
    "separate-async bypass mode never computes training/rollout_probs_diff_*, verl PR 7196; "
    "NeMo-RL's SingleController path dropped avg_trajectory_age, NeMo-RL#3758).",
    "If the trainer logs them under a new name now, map it in the run config's signal_aliases; "
    "if they were dropped on purpose, resolve the alert.",
]
# The entry of one signal in SignalStopped.signals (a list, as JSON keeps it).
KEYS, POINTS, LAST_STEP, WIDEST_GAP, FED_AT_LAST = range(5)


class Arrivals(dict[str, list[Any]]):
    """Signal name -> [raw keys, points, last step, widest gap, steps fed at its last point].

    Only strings and whole numbers: its dump is a plain copy (the generic walk over every value
    cost ~4x as much, at every checkpoint).
    """

    def dump(self) -> dict[str, list[Any]]:
        """A copy, JSON-safe as it is."""
        return {name: [list(entry[KEYS]), *entry[POINTS:]] for name, entry in self.items()}

    def load(self, state: dict[str, list[Any]]) -> None:
        """Continue from a dump()ed state."""
        self.clear()
        self.update((name, [list(entry[KEYS]), *entry[POINTS:]]) for name, entry in state.items())


class SignalStopped(Detector):
    """Canonical signals that stop arriving while other keys keep coming (see the module)."""

    id = "signal_stopped"

    def start(self) -> None:
        """No signal seen yet."""
        # Every signal seen; those of the current run of steps are brought up to date when the
        # run ends (_close_run).
        self.signals = Arrivals()
        self.current: list[str] = []  # the signals of the current run of steps alike
        self.run_points = 0  # steps in that run
        self.run_gap = 0  # the widest step gap inside it
        self.last_step: int | None = None
        self.fed = 0  # steps fed so far
        self.next_check: float | None = None  # first step at which a gone signal can be stopped
        self._run_logged: object = None  # the StepView.logged of the current run
        self._stopped: list[str] = []  # this step's stopped signals
        thresholds = self.thresholds
        self._min_points, self._absent = thresholds["min_points"], thresholds["absent_points"]
        self._factor = thresholds["cadence_factor"]

    def observe(self, view: StepView) -> bool:
        """Count the step; False (nothing to judge) while nothing stopped and nothing is open."""
        step = view.step
        if view.logged is self._run_logged:  # the usual step: the keys of the one before
            gap = step - self.last_step  # type: ignore[operator]
            if gap > self.run_gap:
                self.run_gap = gap
            self.run_points += 1
        else:
            self._close_run()
            self._open_run(view.logged, step)
        self.fed += 1
        self.last_step = step
        check = self.next_check
        self._stopped = self._stopped_now(step) if check is not None and step >= check else []
        return bool(self._stopped or self.open_keys)

    def _close_run(self) -> None:
        """Bring the signals of the current run of steps up to date, as of the last step."""
        signals = self.signals
        for name in self.current:
            entry = signals[name]
            entry[POINTS] += self.run_points
            entry[LAST_STEP] = self.last_step
            entry[WIDEST_GAP] = max(entry[WIDEST_GAP], self.run_gap)
            entry[FED_AT_LAST] = self.fed
        self.run_points, self.run_gap = 0, 0

    def _open_run(self, logged: tuple[tuple[str, tuple[str, ...]], ...], step: int) -> None:
        """Start a run of steps logging these signals at `step`; when can a gone one stop."""
        signals = self.signals
        for name, keys in logged:
            entry = signals.get(name)
            if entry is None:
                signals[name] = [sorted(keys), 0, step, 0, 0]
                continue
            entry[WIDEST_GAP] = max(entry[WIDEST_GAP], step - entry[LAST_STEP])
            entry[KEYS] = sorted({*entry[KEYS], *keys})
        self.current = [name for name, _ in logged]
        self.run_points, self._run_logged = 1, logged
        gone = set(signals).difference(self.current)
        deadlines = [
            signals[name][LAST_STEP] + self._factor * max(signals[name][WIDEST_GAP], 1)
            for name in gone
            if signals[name][POINTS] >= self._min_points
        ]
        self.next_check = min(deadlines, default=None)

    def _stopped_now(self, step: int) -> list[str]:
        """The signals that have stopped by this step (see the module), by name."""
        planned = self.context.planned_steps
        if planned is not None and step >= planned:
            return []
        current = set(self.current)
        return sorted(
            name
            for name, entry in self.signals.items()
            if name not in current
            and entry[POINTS] >= self._min_points
            and step - entry[LAST_STEP] > self._factor * max(entry[WIDEST_GAP], 1)
            and self.fed - entry[FED_AT_LAST] >= self._absent
        )

    def dump(self) -> dict[str, Any]:
        """The state with the current run of steps closed (the next step goes on with it), so
        that it reads the same however the steps were batched."""
        self._close_run()
        return super().dump()

    def load(self, state: dict[str, Any]) -> None:
        """Continue from a dump()ed state; the next step opens a run of steps."""
        super().load(state)
        self._run_logged = None

    def _stability(self, view: StepView) -> Severity | None:
        return "warn" if any(name in FAMILY_OF for name in self._stopped) else None

    def _other(self, view: StepView) -> Severity | None:
        return "info" if any(name not in FAMILY_OF for name in self._stopped) else None

    def _describe(self, names: list[str], stability: bool) -> tuple[str, Facts]:
        signals = self.signals
        last = dict(
            sorted((key, signals[name][LAST_STEP]) for name in names for key in signals[name][KEYS])
        )
        by_step: dict[int, list[str]] = {}
        for key, step in last.items():
            by_step.setdefault(step, []).append(key)
        families: dict[str, list[str]] = {}
        for name in names:
            families.setdefault(FAMILY_OF.get(name, name), []).extend(signals[name][KEYS])
        fed_since = self.fed - max(signals[name][FED_AT_LAST] for name in names)
        shown = "; ".join(
            f"{', '.join(keys)} last at step {step}" for step, keys in by_step.items()
        )
        blind = (
            "the detectors that judge the run on them see nothing from there, which looks like "
            "health"
            if stability
            else "their panels end there"
        )
        message = (
            f"Stopped arriving while the run goes on: {shown}; the {fed_since} steps since "
            f"logged other keys. Unless this was meant, {blind}."
        )
        cadence = {
            key: max(signals[name][WIDEST_GAP], 1) for name in names for key in signals[name][KEYS]
        }
        facts = {
            "stopped": last,
            "families": {family: sorted(keys) for family, keys in families.items()},
            "steps_fed_since": fed_since,
            "cadence_steps": cadence,
        }
        return message, facts

    def _describe_stability(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        return self._describe([name for name in self._stopped if name in FAMILY_OF], True)

    def _describe_other(self, view: StepView, severity: Severity) -> tuple[str, Facts]:
        return self._describe([name for name in self._stopped if name not in FAMILY_OF], False)

    rules: ClassVar[tuple[Rule[SignalStopped], ...]] = (
        Rule(
            "signal_stopped",
            signals=tuple(sorted(FAMILY_OF)),
            fires=_stability,
            describe=_describe_stability,
            advice=STOPPED_ADVICE,
        ),
        Rule(
            "other_signal_stopped",
            signals=tuple(sorted(SIGNAL_NAMES.difference(FAMILY_OF))),
            fires=_other,
            describe=_describe_other,
            advice=STOPPED_ADVICE,
        ),
    )
