"""Per-key bucket summaries (first, min, max, last, count) kept at a few widths on ingest.

A query over a long series reads the coarsest level that still resolves the requested number of
buckets, plus finer levels and raw points only at the unaligned edges, so downsampling a million
points touches at most a few thousand rows. Values follow the storage convention: ``None`` is
NaN, and NaN ranks above everything as the bucket maximum, so downsampling never hides a NaN.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

# Level i summarises aligned buckets of BUCKET_WIDTHS[i] steps, each level 8x the one below, so
# any range is answered from at most ~8 stored rows per output bucket.
BUCKET_WIDTHS: tuple[int, ...] = (16, 128, 1024, 16384)


def _above(a: float | None, b: float | None) -> bool:
    """True when ``a`` outranks ``b`` as a maximum; NaN (None) outranks every number."""
    if a is None:
        return b is not None
    return b is not None and a > b


def _below(a: float | None, b: float | None) -> bool:
    """True when ``a`` outranks ``b`` as a minimum; NaN only wins over NaN-free nothing."""
    if b is None:
        return a is not None
    return a is not None and a < b


@dataclass(slots=True)
class Summary:
    count: int
    first_step: int
    first_value: float | None
    last_step: int
    last_value: float | None
    min_step: int
    min_value: float | None
    max_step: int
    max_value: float | None

    @classmethod
    def of_point(cls, step: int, value: float | None) -> Summary:
        """The summary of a single point."""
        return cls(1, step, value, step, value, step, value, step, value)

    def merge(self, other: Summary) -> None:
        """Fold ``other`` (disjoint steps) into this summary."""
        self.count += other.count
        if other.first_step < self.first_step:
            self.first_step, self.first_value = other.first_step, other.first_value
        if other.last_step > self.last_step:
            self.last_step, self.last_value = other.last_step, other.last_value
        if _below(other.min_value, self.min_value):
            self.min_step, self.min_value = other.min_step, other.min_value
        if _above(other.max_value, self.max_value):
            self.max_step, self.max_value = other.max_step, other.max_value

    def as_row(
        self,
    ) -> tuple[int, int, float | None, int, float | None, int, float | None, int, float | None]:
        """The summary's columns in the ``rollups`` table's order."""
        return (
            self.count,
            self.first_step,
            self.first_value,
            self.last_step,
            self.last_value,
            self.min_step,
            self.min_value,
            self.max_step,
            self.max_value,
        )


def summarize(points: Iterable[tuple[int, float | None]]) -> Summary | None:
    """The summary of ``(step, value)`` points, None when there are none."""
    summary: Summary | None = None
    for step, value in points:
        if summary is None:
            summary = Summary.of_point(step, value)
        else:
            summary.merge(Summary.of_point(step, value))
    return summary


def group_by_bucket(summaries: Iterable[tuple[int, Summary]], width: int) -> dict[int, Summary]:
    """Merge ``(step, summary)`` pairs into ``width``-step buckets keyed by ``step // width``."""
    buckets: dict[int, Summary] = {}
    for step, summary in summaries:
        bucket = step // width
        existing = buckets.get(bucket)
        if existing is None:
            buckets[bucket] = Summary(*summary.as_row())
        else:
            existing.merge(summary)
    return buckets


def bucket_points(points: Sequence[tuple[int, float | None]], width: int) -> dict[int, Summary]:
    """Summaries of step-sorted ``points`` (NaN as None) per bucket, in one pass."""
    buckets: dict[int, Summary] = {}
    current: Summary | None = None
    current_bucket = -1
    for step, value in points:
        bucket = step // width
        if bucket != current_bucket or current is None:
            current = buckets[bucket] = Summary.of_point(step, value)
            current_bucket = bucket
            continue
        current.count += 1
        current.last_step, current.last_value = step, value
        if value is None:
            if current.max_value is not None:
                current.max_step, current.max_value = step, None
        else:
            if current.min_value is None or value < current.min_value:
                current.min_step, current.min_value = step, value
            if current.max_value is not None and value > current.max_value:
                current.max_step, current.max_value = step, value
    return buckets


SummaryRow = tuple[
    int, int, int, float | None, int, float | None, int, float | None, int, float | None
]


def bucket_rows(steps: Sequence[int], values: Sequence[float], width: int) -> Iterator[SummaryRow]:
    """``(bucket, *Summary.as_row())`` per bucket of step-sorted columns (NaN as float NaN).

    The same summaries as ``bucket_points``, a bucket at a time: a NaN-free bucket (almost
    every one; ``sum`` is NaN exactly when a NaN is present, or +Inf meets -Inf) takes its
    min and max with the builtins, at C speed; any other goes through ``bucket_points``.
    """
    start, end = 0, len(steps)
    while start < end:
        bucket = steps[start] // width
        stop = bisect_left(steps, (bucket + 1) * width, start, end)
        part = values[start:stop]
        total = sum(part)
        if total == total:
            low, high = min(part), max(part)
            yield (
                bucket,
                stop - start,
                steps[start],
                part[0],
                steps[stop - 1],
                part[-1],
                steps[start + part.index(low)],
                low,
                steps[start + part.index(high)],
                high,
            )
        else:
            points = [
                (s, None if v != v else v) for s, v in zip(steps[start:stop], part, strict=True)
            ]
            yield (bucket, *bucket_points(points, width)[bucket].as_row())
        start = stop
