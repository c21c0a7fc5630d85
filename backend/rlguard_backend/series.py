"""Series queries: raw points when they fit, spike-preserving min/max buckets when they don't."""

from __future__ import annotations

import math

from sqlalchemy.orm import Session

from rlguard_backend import storage
from rlguard_backend.models import MetricKey
from rlguard_backend.rollups import BUCKET_WIDTHS, Summary, bucket_points, group_by_bucket
from rlguard_backend.schemas import SeriesData, float_to_wire

POINTS_PER_BUCKET = 4  # first, min, max, last


def bucket_width(span: int, max_points: int) -> tuple[int, int]:
    """Output bucket width for ``span`` steps and the finest stored level that tiles it (-1 raw).

    The width is a multiple of that level's bucket width so stored buckets never straddle two
    output buckets; one bucket is kept in reserve because the range need not be aligned.
    """
    buckets = max(1, max_points // POINTS_PER_BUCKET - 1)
    wanted = -(-span // buckets)
    level = max((i for i, w in enumerate(BUCKET_WIDTHS) if w <= wanted), default=-1)
    if level < 0:
        return wanted, level
    unit = BUCKET_WIDTHS[level]
    return -(-wanted // unit) * unit, level


def read_series(
    session: Session,
    key: MetricKey,
    lo: int,
    hi: int | None,
    max_points: int,
    *,
    smoothing: float = 0.0,
    include_times: bool = False,
) -> SeriesData:
    """The key's points with ``lo <= step <= hi``, downsampled to at most ``max_points``.

    With ``smoothing`` the debiased EMA of the full-resolution points is added as ``smoothed``
    (this reads every point in range); ``include_times`` adds wall times to downsampled points.
    """
    last = key.last_step
    hi = last if hi is None or (last is not None and hi > last) else hi
    if last is None or hi is None or lo > hi:
        return _raw([], last)
    if smoothing > 0:
        return _smoothed(
            storage.STORE.read_points(session, key.id, lo, hi), smoothing, max_points, lo, last
        )
    span = hi - lo + 1
    if span <= max_points:
        return _raw(storage.STORE.read_points(session, key.id, lo, hi), last)
    width, level = bucket_width(span, max_points)
    if level < 0:
        # Narrower than one stored bucket per output bucket: one pass over the raw points.
        rows = storage.STORE.read_points(session, key.id, lo, hi)
        if len(rows) <= max_points:
            return _raw(rows, last)
        buckets = bucket_points([(s, v) for s, v, _ in rows], width)
        data = _downsampled(buckets, width, lo, len(rows), last)
        if include_times:
            times = {r[0]: r[2] for r in rows}
            data.times = [times[step] for step in data.steps]
        return data
    parts = storage.STORE.cover(session, key.id, lo, hi, level)
    total = sum(p.count for p in parts)
    if total <= max_points:
        return _raw(storage.STORE.read_points(session, key.id, lo, hi), last)
    buckets = group_by_bucket(((p.first_step, p) for p in parts), width)
    data = _downsampled(buckets, width, lo, total, last)
    if include_times:
        data.times = storage.STORE.read_times(session, key.id, data.steps)
    return data


def debiased_ema(values: list[float | None], weight: float) -> list[float | None]:
    """TensorBoard's smoothing: an EMA divided by ``1 - weight**n``; non-finite values pass."""
    smoothed: list[float | None] = []
    accumulator, count = 0.0, 0
    for value in values:
        if value is None or not math.isfinite(value):
            smoothed.append(value)
            continue
        accumulator = accumulator * weight + (1 - weight) * value
        count += 1
        smoothed.append(accumulator / (1 - weight**count))
    return smoothed


def _smoothed(
    rows: list[tuple[int, float | None, float | None]],
    weight: float,
    max_points: int,
    lo: int,
    last: int | None,
) -> SeriesData:
    ema = dict(zip((r[0] for r in rows), debiased_ema([r[1] for r in rows], weight), strict=True))
    if len(rows) <= max_points:
        data = _raw(rows, last)
    else:
        width, _ = bucket_width(rows[-1][0] - lo + 1, max_points)
        buckets = bucket_points([(s, v) for s, v, _ in rows], width)
        data = _downsampled(buckets, width, lo, len(rows), last)
        times = {r[0]: r[2] for r in rows}
        data.times = [times[step] for step in data.steps]
    data.smoothed = [float_to_wire(ema[step]) for step in data.steps]
    return data


def _raw(rows: list[tuple[int, float | None, float | None]], last: int | None) -> SeriesData:
    return SeriesData.model_construct(
        steps=[r[0] for r in rows],
        values=[float_to_wire(r[1]) for r in rows],
        times=[r[2] for r in rows],
        downsampled=False,
        method="raw",
        total_points=len(rows),
        last_step=last,
    )


def _bucket_points(summary: Summary) -> list[tuple[int, float | None]]:
    chosen = {
        summary.first_step: summary.first_value,
        summary.min_step: summary.min_value,
        summary.max_step: summary.max_value,
        summary.last_step: summary.last_value,
    }
    return sorted(chosen.items())


def _downsampled(
    buckets: dict[int, Summary], width: int, lo: int, total: int, last: int | None
) -> SeriesData:
    steps: list[int] = []
    values: list[float | str] = []
    starts, mins, maxs = [], [], []
    for bucket in sorted(buckets):
        summary = buckets[bucket]
        for step, value in _bucket_points(summary):
            steps.append(step)
            values.append(float_to_wire(value))
        starts.append(max(bucket * width, lo))
        mins.append(float_to_wire(summary.min_value))
        maxs.append(float_to_wire(summary.max_value))
    return SeriesData.model_construct(
        steps=steps,
        values=values,
        downsampled=True,
        method="minmax",
        total_points=total,
        bucket_size=width,
        bucket_start=starts,
        min=mins,
        max=maxs,
        last_step=last,
    )
