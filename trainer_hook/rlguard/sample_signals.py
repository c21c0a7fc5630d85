"""Signals read from a step's rollout samples, logged as metrics of that step for the detectors.

From every training sample a step logs (the ``"train"`` split, before the per-step budget picks
the ones kept), the sender thread derives:

- ``samples/truncated_fraction``: the share whose ``truncated`` field is set (only when the
  samples carry one);
- ``samples/repetition_rate``: the mean share of repeated word 4-grams in a response,
  seq-rep-4 of Welleck et al. 2020 (``1 − unique 4-grams / 4-grams``; human text ≈ 0.01,
  looping greedy text ≈ 0.4); responses under 8 words are not judged;
- ``samples/degenerate_fraction``: the share of responses that are empty, hold undecodable
  bytes (U+FFFD), are mostly not letters or digits (``!!!!…``), or that the trainer marked
  ``malformed`` (its own format check).

Text is read for at most ``TEXTS_PER_CALL`` responses of a call, drawn at random, so a step of
thousands of rollouts costs the sender thread a bounded ~1 ms. Several calls at one step add
up: the values of a step are re-logged as each call arrives, the later holding them all.

This public module is the one definition of the three signals, standard library only: the hook's
sender reads each drain with ``SampleSignals``; the service imports ``step_signals`` to derive
them for samples posted straight to its REST API, and ``SIGNAL_KEYS`` to know them.

>>> step_signals([{"response": "", "truncated": True}, {"response": "7", "truncated": False}])
{'samples/truncated_fraction': 0.5, 'samples/degenerate_fraction': 0.5}
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping
from typing import Any

from rlguard import _wire

__all__ = [
    "DEGENERATE",
    "REPETITION",
    "SIGNAL_KEYS",
    "TRUNCATED",
    "SampleSignals",
    "is_degenerate",
    "repetition_rate",
    "step_signals",
]

TRUNCATED = "samples/truncated_fraction"
REPETITION = "samples/repetition_rate"
DEGENERATE = "samples/degenerate_fraction"
SIGNAL_KEYS = (TRUNCATED, REPETITION, DEGENERATE)
REPETITION_N = 4
MIN_WORDS = 2 * REPETITION_N
TEXTS_PER_CALL = 64
MIN_JUDGED_CHARS = 16  # shorter responses are not judged for their share of letters
MIN_WORD_CHAR_SHARE = 0.25
JUDGED_CHARS = 2048  # of a non-ASCII response, the head judged for its share of letters
_NOT_WORD_CHARS = re.compile(r"[\W_]+")
_NOT_ASCII_WORD_BYTES = bytes(b for b in range(256) if not (chr(b).isascii() and chr(b).isalnum()))


def repetition_rate(words: list[str]) -> float | None:
    """seq-rep-4 of a word list: the share of its 4-grams that repeat an earlier one."""
    if len(words) < MIN_WORDS:
        return None
    grams = len(words) - REPETITION_N + 1
    return 1.0 - len(set(zip(words, words[1:], words[2:], words[3:], strict=False))) / grams


def is_degenerate(text: str, marked_malformed: bool = False) -> bool:
    """Empty, undecodable, mostly symbols, or marked malformed by the trainer."""
    stripped = text.strip()
    if marked_malformed or not stripped or "\ufffd" in stripped:
        return True
    if len(stripped) < MIN_JUDGED_CHARS:
        return False
    if stripped.isascii():  # the usual case: a C-level delete, ~20x the regular expression
        word_chars = len(stripped.encode().translate(None, _NOT_ASCII_WORD_BYTES))
        return word_chars < MIN_WORD_CHAR_SHARE * len(stripped)
    head = stripped[:JUDGED_CHARS]
    return len(_NOT_WORD_CHARS.sub("", head)) < MIN_WORD_CHAR_SHARE * len(head)


class _Tally:
    """Counts behind one step's signals."""

    __slots__ = ("degenerate", "repeated", "repetition_sum", "texts", "truncated", "with_flag")

    def __init__(self) -> None:
        self.with_flag = self.truncated = 0  # samples with a truncated field, and set
        self.texts = self.degenerate = 0
        self.repeated = 0  # responses judged for repetition
        self.repetition_sum = 0.0

    def values(self) -> dict[str, float]:
        """The step's signals so far; a signal nothing was counted for is left out."""
        values: dict[str, float] = {}
        if self.with_flag:
            values[TRUNCATED] = self.truncated / self.with_flag
        if self.repeated:
            values[REPETITION] = self.repetition_sum / self.repeated
        if self.texts:
            values[DEGENERATE] = self.degenerate / self.texts
        return values

    def count(self, records: Iterable[Any], rng: random.Random) -> None:
        """Add one call's records (mappings; anything else is passed over); of more than
        ``TEXTS_PER_CALL``, that many drawn with ``rng`` are read for their text."""
        mappings = [r for r in records if isinstance(r, Mapping)]
        for record in mappings:
            flag = record.get("truncated")
            if flag is not None and (number := _wire.to_float(flag)) is not None:
                self.with_flag += 1
                self.truncated += number > 0.5
        read = mappings
        if len(mappings) > TEXTS_PER_CALL:  # at random: rollouts come in groups of a prompt
            read = rng.sample(mappings, TEXTS_PER_CALL)
        for record in read:
            text = record.get("response")
            if not isinstance(text, str):
                continue
            malformed = _wire.to_float(record.get("malformed")) or 0.0
            self.texts += 1
            self.degenerate += is_degenerate(text, malformed > 0.5)
            rate = repetition_rate(text.split())
            if rate is not None:
                self.repeated += 1
                self.repetition_sum += rate


class SampleSignals:
    """Reads log_samples() calls into per-step signals; keeps the newest step's counts, so
    a step logged over several calls (or drains) is re-logged with all of them."""

    def __init__(self) -> None:
        self._step = -1
        self._tally = _Tally()
        self._rng = random.Random(0)

    def __repr__(self) -> str:
        return f"SampleSignals(step={self._step})"

    def read(self, entries: Iterable[tuple[Any, float, list[Any], Any]]) -> dict[int, dict]:
        """Signals by step for the ``(step, time, records, split)`` entries of one drain."""
        by_step: dict[int, dict[str, float]] = {}
        for raw_step, _, records, split in entries:
            step = _wire.to_step(raw_step)
            if step is None or split != "train":
                continue
            if step != self._step:
                self._step, self._tally = step, _Tally()
            self._tally.count(records, self._rng)
            values = self._tally.values()
            if values:
                by_step[step] = values
        return by_step


def step_signals(records: Iterable[Any], seed: int = 0) -> dict[str, float]:
    """The signals of one step's training samples, read as the hook reads them; the service
    derives the same for samples posted to it without them (``signals_logged`` unset)."""
    tally = _Tally()
    tally.count(records, random.Random(seed))
    return tally.values()
