"""What the sender does with queued ``log_samples()`` calls: shape them (budgets, sampling
policy, sizes) into wire samples, count and warn about what is left out, batch the rest."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from rlguard import _samples, _wire
from rlguard._report import Counters, Warnings

Deliver = Callable[[str, int, bytes], None]  # (batch_id, samples, body)


class SampleBatcher:
    """Turns ``(step, time, records, split)`` entries into sample batches for ``deliver``."""

    def __init__(
        self,
        shaper: _samples.SampleShaper,
        counters: Counters,
        warnings: Warnings,
        deliver: Deliver,
    ) -> None:
        self._shaper = shaper
        self._counters = counters
        self._warnings = warnings
        self._deliver = deliver

    def __repr__(self) -> str:
        return f"SampleBatcher({self._shaper.max_per_step} per step)"

    def ship(self, entries: list[tuple[Any, float, list[Any], Any]]) -> None:
        """Shape what log_samples() queued into wire samples and deliver them in batches."""
        samples = [sample for entry in entries for sample in self._shape(*entry)]
        self._counters.samples_logged += len(samples)
        for chunk in _samples.split_samples(samples):
            batch_id = uuid.uuid4().hex
            self._deliver(batch_id, len(chunk), _samples.encode_samples(batch_id, chunk))

    def _shape(self, raw_step: Any, when: float, records: list[Any], split: Any) -> list[dict]:
        """One log_samples() call as wire samples; what it leaves out is counted (and warned
        about once per cause)."""
        step = _wire.to_step(raw_step)
        if step is None:
            return self._drop_call(records, f"step must be an int >= 0, got {raw_step!r}")
        if not isinstance(split, str) or not _samples.SPLIT_PATTERN.match(split):
            return self._drop_call(
                records, f"split must be a short lower-case name like 'validation', got {split!r}"
            )
        try:
            shaped = self._shaper.shape(step, when, records, split)
        except Exception as exc:  # a user object whose conversion raised: report, keep going
            self._counters.samples_dropped += len(records)
            self._warnings.warn_once(
                f"sample-convert:{type(exc).__name__}",
                f"rlguard: cannot read the samples logged at step {step} ({exc!r}); that call "
                "was dropped (shown once)",
            )
            return []
        self._counters.samples_filtered += shaped.filtered
        self._counters.samples_dropped += shaped.invalid
        if shaped.invalid:
            self._warnings.warn_once(
                "sample-record",
                "rlguard: log_samples() takes a list of dicts; other items were dropped "
                "(shown once)",
            )
        for key in shaped.skipped_fields:
            self._warnings.warn_once(
                f"sample-key:{key}",
                f"rlguard: sample field {key!r} is neither a number nor text; skipped "
                "(shown once per field)",
            )
        return shaped.samples

    def _drop_call(self, records: list[Any], problem: str) -> list[dict]:
        self._counters.samples_dropped += len(records)
        self._warnings.warn_once(
            f"sample-call:{problem.split()[0]}",
            f"rlguard: log_samples() {problem}; that call was dropped (shown once)",
        )
        return []
