"""Storage verbs for points and their rollups. No commits here: the caller owns the transaction.

Points live in chunks (``point_chunks``): per key, runs of steps packed into three arrays. A
batch adds one chunk per key, so ingest writes ~20 rows where it would write ~2,000, and a
key's chunks never overlap, so a range read is one index seek and a few decodes.

How chunks grow: new points past a key's last step get a chunk of their own when there are
OWN_CHUNK_POINTS or more of them; fewer are appended to the key's newest chunk (its "tail",
whose first step and size ``metric_keys`` remembers, so the append reads nothing) while that
holds fewer than TAIL_CHUNK_POINTS. A trainer logging one step per batch thus fills chunks of
~128 points. Points at or before a key's last step (replays, rewinds, out-of-order batches)
rewrite only the chunks that hold their steps; points falling between chunks get new chunks
there. Writes larger than MAX_CHUNK_POINTS are split.
"""

from __future__ import annotations

import math
import struct
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from rlguard_backend.models import Rollup
from rlguard_backend.store import sql
from rlguard_backend.store.packed_arrays import pack, unpack
from rlguard_backend.store.rollups import (
    BUCKET_WIDTHS,
    Summary,
    bucket_rows,
    group_by_bucket,
)

OWN_CHUNK_POINTS = 64
TAIL_CHUNK_POINTS = 128
MAX_CHUNK_POINTS = 1024
READ_FIRST_PAGE_CHUNKS = 64  # chunks read_first fetches per query
CHUNK_COLUMNS = (
    ("key_id", "int4"),
    ("first_step", "int8"),
    ("last_step", "int8"),
    ("count", "int4"),
    ("step_data", "bytea"),
    ("value_data", "bytea"),
    ("time_data", "bytea"),
)
# The chunks of key ? that can hold steps ? (lo) .. ? (hi): the one holding lo, if any, and
# every one starting inside the range. Parameters: key, hi, key, lo, lo.
_CHUNKS_IN_RANGE = (
    "WHERE key_id = ? AND first_step <= ? AND first_step >= coalesce("
    "(SELECT max(first_step) FROM point_chunks WHERE key_id = ? AND first_step <= ?), ?)"
)
_TIME = struct.Struct("<d")
SUMMARY_COLUMNS = (
    ("count", "int4"),
    ("first_step", "int8"),
    ("first_value", "float8"),
    ("last_step", "int8"),
    ("last_value", "float8"),
    ("min_step", "int8"),
    ("min_value", "float8"),
    ("max_step", "int8"),
    ("max_value", "float8"),
)
ROLLUP_COLUMNS = ", ".join(name for name, _ in SUMMARY_COLUMNS)
ROLLUP_KEY_COLUMNS = (("key_id", "int4"), ("level", "int2"), ("bucket", "int8"))
ROLLUPS_ON_CONFLICT = "ON CONFLICT (key_id, level, bucket) DO UPDATE SET " + ", ".join(
    f"{name} = excluded.{name}" for name, _ in SUMMARY_COLUMNS
)
# Merge a summary of later steps into the stored one, in SQL, with the Summary.merge rules
# (NULL is NaN: it never wins a minimum and always wins a maximum). No read round trip.
_MIN_WINS = (
    "excluded.min_value IS NOT NULL AND (rollups.min_value IS NULL "
    "OR excluded.min_value < rollups.min_value)"
)
_MAX_WINS = (
    "rollups.max_value IS NOT NULL AND (excluded.max_value IS NULL "
    "OR excluded.max_value > rollups.max_value)"
)
ROLLUPS_ON_CONFLICT_APPEND = (
    "ON CONFLICT (key_id, level, bucket) DO UPDATE SET "
    "count = rollups.count + excluded.count, "
    "last_step = excluded.last_step, last_value = excluded.last_value, "
    f"min_step = CASE WHEN {_MIN_WINS} THEN excluded.min_step ELSE rollups.min_step END, "
    f"min_value = CASE WHEN {_MIN_WINS} THEN excluded.min_value ELSE rollups.min_value END, "
    f"max_step = CASE WHEN {_MAX_WINS} THEN excluded.max_step ELSE rollups.max_step END, "
    f"max_value = CASE WHEN {_MAX_WINS} THEN excluded.max_value ELSE rollups.max_value END"
)

Row = tuple[int, float | None, float | None]


class Columns(NamedTuple):
    """One key's new points in step order, each step once; NaN values and missing wall times
    are float NaN. Ingest writes columns: they pack into a chunk without a per-point loop."""

    steps: Sequence[int]
    values: Sequence[float]
    times: Sequence[float]

    def rows(self) -> list[Row]:
        """As ``(step, value, wall_time)`` rows, None for NaN (the read side's convention)."""
        return list(
            zip(self.steps, _none_for_nan(self.values), _none_for_nan(self.times), strict=True)
        )


KeyColumns = Mapping[int, Columns]


@dataclass(frozen=True, slots=True)
class KeyTail:
    """What ingest knows of a key before writing: its last step and its newest chunk."""

    last_step: int | None
    tail_step: int | None = None
    tail_count: int = 0


def _nan_for_none(values: Iterable[float | None]) -> list[float]:
    return [math.nan if v is None else v for v in values]


def _none_for_nan(values: Iterable[float]) -> list[float | None]:
    # NaN is the only value unequal to itself; the storage convention reads it as None.
    return [None if v != v else v for v in values]


def encode(rows: Sequence[Row]) -> tuple[bytes, bytes, bytes]:
    """``(step_data, value_data, time_data)`` of step-sorted rows."""
    return (
        pack("q", [r[0] for r in rows]),
        pack("d", _nan_for_none([r[1] for r in rows])),
        pack("d", _nan_for_none([r[2] for r in rows])),
    )


def decode(step_data: bytes, value_data: bytes, time_data: bytes) -> list[Row]:
    """A chunk's rows (step, value, time) from its three packed columns; NaN reads as None."""
    steps = unpack("q", step_data).tolist()
    values = _none_for_nan(unpack("d", value_data))
    times = _none_for_nan(unpack("d", time_data))
    return list(zip(steps, values, times, strict=True))


def _chunk_row(key_id: int, rows: Sequence[Row]) -> tuple[object, ...]:
    return (key_id, rows[0][0], rows[-1][0], len(rows), *encode(rows))


def _pieces(rows: Sequence[Row]) -> list[Sequence[Row]]:
    return [rows[i : i + MAX_CHUNK_POINTS] for i in range(0, len(rows), MAX_CHUNK_POINTS)]


def store_points(
    session: Session, points: KeyColumns, tails: Mapping[int, KeyTail]
) -> dict[int, KeyTail]:
    """Write each key's new points; a later write of a step wins.

    ``tails`` is each key's state before the write, as ``metric_keys`` holds it; the answer
    is its state after, for the caller to store there.
    """
    fresh: list[tuple[object, ...]] = []
    appends: list[tuple[object, ...]] = []
    after: dict[int, KeyTail] = {}
    for key_id, new in points.items():
        tail, first, last, count = tails[key_id], new.steps[0], new.steps[-1], len(new.steps)
        if tail.last_step is not None and first <= tail.last_step:
            after[key_id] = _rewrite(session, key_id, new.rows(), tail, fresh)
        elif (
            tail.tail_step is not None
            and count < OWN_CHUNK_POINTS
            and tail.tail_count < TAIL_CHUNK_POINTS
        ):
            appends.append((last, count, *_pack_columns(new), key_id, tail.tail_step))
            after[key_id] = KeyTail(last, tail.tail_step, tail.tail_count + count)
        elif count <= MAX_CHUNK_POINTS:
            fresh.append((key_id, first, last, count, *_pack_columns(new)))
            after[key_id] = KeyTail(last, first, count)
        else:
            pieces = _pieces(new.rows())
            fresh.extend(_chunk_row(key_id, piece) for piece in pieces)
            after[key_id] = KeyTail(last, pieces[-1][0][0], len(pieces[-1]))
    sql.bulk_insert(session, "point_chunks", CHUNK_COLUMNS, fresh)
    _append_to_tails(session, appends)
    return after


def _pack_columns(new: Columns) -> tuple[bytes, bytes, bytes]:
    return pack("q", new.steps), pack("d", new.values), pack("d", new.times)


def _append_to_tails(session: Session, rows: Sequence[tuple[object, ...]]) -> None:
    """Append packed points in SQL; rows are ``(last_step, count, 3 blobs, key_id, first_step)``."""
    if not rows:
        return
    if sql.dialect(session) == "postgresql":
        columns = [list(column) for column in zip(*rows, strict=True)]
        sql.execute_arrays(
            session,
            "UPDATE point_chunks AS c SET last_step = u.last_step, count = c.count + u.count, "
            "step_data = c.step_data || u.step_data, value_data = c.value_data || u.value_data, "
            "time_data = c.time_data || u.time_data FROM unnest(?::int8[], ?::int4[], "
            "?::bytea[], ?::bytea[], ?::bytea[], ?::int4[], ?::int8[]) AS u(last_step, count, "
            "step_data, value_data, time_data, key_id, first_step) "
            "WHERE c.key_id = u.key_id AND c.first_step = u.first_step",
            columns,
        )
        return
    # SQLite's || joins the bytes of two blobs as text; CAST turns the result back into a
    # blob, byte for byte (the database encoding is UTF-8, so nothing is transcoded).
    sql.executemany(
        session,
        "UPDATE point_chunks SET last_step = ?, count = count + ?, "
        "step_data = CAST(step_data || ? AS BLOB), value_data = CAST(value_data || ? AS BLOB), "
        "time_data = CAST(time_data || ? AS BLOB) WHERE key_id = ? AND first_step = ?",
        rows,
    )


def _rewrite(
    session: Session,
    key_id: int,
    rows: Sequence[Row],
    tail: KeyTail,
    fresh: list[tuple[object, ...]],
) -> KeyTail:
    """Merge rows reaching back into stored steps; new chunks for the gaps go to ``fresh``."""
    lo, hi = rows[0][0], rows[-1][0]
    stored = sql.fetchall(
        session,
        f"SELECT first_step, last_step FROM point_chunks {_CHUNKS_IN_RANGE} ORDER BY first_step",
        (key_id, hi, key_id, lo, lo),
    )
    firsts = [first for first, _ in stored]
    inside: dict[int, list[Row]] = {}  # chunk index -> rows within its steps
    gaps: dict[int, list[Row]] = {}  # index of the chunk after the gap -> rows in the gap
    for row in rows:
        index = bisect_right(firsts, row[0]) - 1
        if index >= 0 and row[0] <= stored[index][1]:
            inside.setdefault(index, []).append(row)
        else:
            gaps.setdefault(index + 1, []).append(row)
    tail_step, tail_count = tail.tail_step, tail.tail_count
    for index, new_rows in inside.items():
        first = firsts[index]
        ((step_data, value_data, time_data),) = sql.fetchall(
            session,
            "SELECT step_data, value_data, time_data FROM point_chunks "
            "WHERE key_id = ? AND first_step = ?",
            (key_id, first),
        )
        merged = {row[0]: row for row in decode(step_data, value_data, time_data)}
        merged.update((row[0], row) for row in new_rows)
        content = [merged[step] for step in sorted(merged)]
        pieces = _pieces(content)
        _replace_chunk(session, key_id, first, pieces[0])
        fresh.extend(_chunk_row(key_id, piece) for piece in pieces[1:])
        for piece in pieces:
            if tail_step is None or piece[0][0] >= tail_step:
                tail_step, tail_count = piece[0][0], len(piece)
    for gap_rows in gaps.values():
        for piece in _pieces(gap_rows):
            fresh.append(_chunk_row(key_id, piece))
            if tail_step is None or piece[0][0] > tail_step:
                tail_step, tail_count = piece[0][0], len(piece)
    last = hi if tail.last_step is None else max(hi, tail.last_step)
    return KeyTail(last, tail_step, tail_count)


def _replace_chunk(session: Session, key_id: int, first: int, rows: Sequence[Row]) -> None:
    """Store ``rows`` (starting at ``first``) as the content of the chunk at ``first``."""
    sql.execute(
        session,
        "UPDATE point_chunks SET last_step = ?, count = ?, step_data = ?, value_data = ?, "
        "time_data = ? WHERE key_id = ? AND first_step = ?",
        (rows[-1][0], len(rows), *encode(rows), key_id, first),
    )


def key_tail(session: Session, key_id: int) -> KeyTail:
    """A key's state read from its chunks (after a rewind, say)."""
    found = sql.fetchall(
        session,
        "SELECT first_step, last_step, count FROM point_chunks WHERE key_id = ? "
        "ORDER BY first_step DESC LIMIT 1",
        (key_id,),
    )
    if not found:
        return KeyTail(None)
    first, last, count = found[0]
    return KeyTail(last, first, count)


def _upsert_rollups(session: Session, rows: list[tuple[object, ...]]) -> None:
    columns = ROLLUP_KEY_COLUMNS + SUMMARY_COLUMNS
    sql.bulk_insert(session, "rollups", columns, rows, ROLLUPS_ON_CONFLICT)


def update_rollups(
    session: Session, points: KeyColumns, previous_last_step: Mapping[int, int | None]
) -> None:
    """Bring every level's buckets up to date after ``points`` were stored."""
    rows: list[tuple[object, ...]] = []
    for key_id, new in points.items():
        last = previous_last_step.get(key_id)
        if last is not None and new.steps[0] <= last:
            recompute_rollups(session, key_id, new.steps)
            continue
        # Past the key's last step: summarize the new points, merge in SQL, read nothing.
        for level, width in enumerate(BUCKET_WIDTHS):
            rows.extend((key_id, level, *row) for row in bucket_rows(new.steps, new.values, width))
    columns = ROLLUP_KEY_COLUMNS + SUMMARY_COLUMNS
    sql.bulk_insert(session, "rollups", columns, rows, ROLLUPS_ON_CONFLICT_APPEND)


def recompute_rollups(session: Session, key_id: int, steps: Iterable[int]) -> None:
    """Rebuild the buckets holding ``steps`` at every level from the level below (raw at 0)."""
    buckets = {step // BUCKET_WIDTHS[0] for step in steps}
    for level, width in enumerate(BUCKET_WIDTHS):
        if level > 0:
            buckets = {b // (width // BUCKET_WIDTHS[level - 1]) for b in buckets}
        lo, hi = min(buckets) * width, (max(buckets) + 1) * width - 1
        if level == 0:
            children = [
                (s, Summary.of_point(s, v)) for s, v, _ in read_points(session, key_id, lo, hi)
            ]
        else:
            children = [
                (summary.first_step, summary)
                for summary in read_rollup_range(session, key_id, level - 1, lo, hi)
            ]
        fresh = {b: s for b, s in group_by_bucket(children, width).items() if b in buckets}
        stale = [(key_id, level, b) for b in buckets if b not in fresh]
        sql.executemany(
            session, "DELETE FROM rollups WHERE key_id = ? AND level = ? AND bucket = ?", stale
        )
        _upsert_rollups(session, [(key_id, level, b, *s.as_row()) for b, s in fresh.items()])


def read_points(session: Session, key_id: int, lo: int, hi: int) -> list[Row]:
    """Raw ``(step, value, wall_time)`` with ``lo <= step <= hi``, in step order."""
    found = sql.fetchall(
        session,
        "SELECT first_step, last_step, step_data, value_data, time_data FROM point_chunks "
        f"{_CHUNKS_IN_RANGE} ORDER BY first_step",
        (key_id, hi, key_id, lo, lo),
    )
    out: list[Row] = []
    for first, last, step_data, value_data, time_data in found:
        rows = decode(step_data, value_data, time_data)
        if first < lo or last > hi:
            steps = [row[0] for row in rows]
            rows = rows[bisect_left(steps, lo) : bisect_right(steps, hi)]
        out.extend(rows)
    return out


def read_first(session: Session, key_id: int, lo: int, hi: int, limit: int) -> list[Row]:
    """The key's first ``limit`` points with ``lo <= step <= hi``, in step order.

    Reads chunks in pages from the one holding ``lo``, so the cost follows the points read,
    whatever the gaps between their steps (2^40 apart, say).
    """
    select_chunks = (
        "SELECT first_step, last_step, step_data, value_data, time_data FROM point_chunks "
    )
    page = f"ORDER BY first_step LIMIT {READ_FIRST_PAGE_CHUNKS}"
    found = sql.fetchall(
        session, f"{select_chunks}{_CHUNKS_IN_RANGE} {page}", (key_id, hi, key_id, lo, lo)
    )
    out: list[Row] = []
    while found:
        for first, last, step_data, value_data, time_data in found:
            rows = decode(step_data, value_data, time_data)
            if first < lo or last > hi:
                rows = [row for row in rows if lo <= row[0] <= hi]
            out.extend(rows)
        if len(out) >= limit or len(found) < READ_FIRST_PAGE_CHUNKS:
            break
        found = sql.fetchall(
            session,
            f"{select_chunks}WHERE key_id = ? AND first_step > ? AND first_step <= ? {page}",
            (key_id, found[-1][0], hi),
        )
    return out[:limit]


def read_arrays(session: Session, key_id: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """``read_points`` as two arrays, steps (int64) and values (float64, NaN kept), unpacked
    by numpy: for reads of many thousands of points at once (grouped bands)."""
    found = sql.fetchall(
        session,
        f"SELECT step_data, value_data FROM point_chunks {_CHUNKS_IN_RANGE} ORDER BY first_step",
        (key_id, hi, key_id, lo, lo),
    )
    if not found:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
    steps = np.concatenate([np.frombuffer(s, dtype="<i8") for s, _ in found]).astype(np.int64)
    values = np.concatenate([np.frombuffer(v, dtype="<f8") for _, v in found]).astype(np.float64)
    inside = (steps >= lo) & (steps <= hi)
    return steps[inside], values[inside]


def read_times(session: Session, key_id: int, steps: Sequence[int]) -> list[float | None]:
    """Wall times of the given steps of one key, in the order given.

    Only the wanted positions of a chunk's times are unpacked, so the times of a few thousand
    downsampled points of a long series cost a bisect each, not a decode of the series.
    """
    if not steps:
        return []
    wanted = sorted(set(steps))
    times: dict[int, float | None] = {}
    for first, last, step_data, time_data in sql.fetchall(
        session,
        "SELECT first_step, last_step, step_data, time_data FROM point_chunks "
        f"{_CHUNKS_IN_RANGE} ORDER BY first_step",
        (key_id, wanted[-1], key_id, wanted[0], wanted[0]),
    ):
        inside = wanted[bisect_left(wanted, first) : bisect_right(wanted, last)]
        if not inside:
            continue
        chunk_steps = unpack("q", step_data)
        for step in inside:
            index = bisect_left(chunk_steps, step)
            if index < len(chunk_steps) and chunk_steps[index] == step:
                (moment,) = _TIME.unpack_from(time_data, index * _TIME.size)
                times[step] = None if moment != moment else moment
    return [times.get(step) for step in steps]


def read_rollup_range(session: Session, key_id: int, level: int, lo: int, hi: int) -> list[Summary]:
    """Summaries of level ``level`` for buckets lying inside steps ``lo..hi``."""
    width = BUCKET_WIDTHS[level]
    rows = sql.fetchall(
        session,
        f"SELECT {ROLLUP_COLUMNS} FROM rollups WHERE key_id = ? AND level = ? "
        "AND bucket >= ? AND bucket <= ? ORDER BY bucket",
        (key_id, level, lo // width, hi // width),
    )
    return [Summary(*row) for row in rows]


def cover(session: Session, key_id: int, lo: int, hi: int, level: int) -> list[Summary]:
    """Summaries exactly covering steps ``lo..hi``: aligned buckets of ``level``, finer at edges."""
    if lo > hi:
        return []
    if level < 0:
        return [Summary.of_point(s, v) for s, v, _ in read_points(session, key_id, lo, hi)]
    width = BUCKET_WIDTHS[level]
    first_full = -(-lo // width)
    last_full = (hi + 1) // width - 1
    if first_full > last_full:
        return cover(session, key_id, lo, hi, level - 1)
    middle = read_rollup_range(
        session, key_id, level, first_full * width, (last_full + 1) * width - 1
    )
    left = cover(session, key_id, lo, first_full * width - 1, level - 1)
    right = cover(session, key_id, (last_full + 1) * width, hi, level - 1)
    return left + middle + right


def last_value_sql(key_id: ColumnElement[int]) -> ColumnElement[float]:
    """The key's last stored value as SQL, from its newest coarsest-level summary."""
    query = (
        select(Rollup.last_value)
        .where(Rollup.key_id == key_id, Rollup.level == len(BUCKET_WIDTHS) - 1)
        .order_by(Rollup.bucket.desc())
        .limit(1)
    )
    return query.scalar_subquery()


def delete_after(session: Session, key_ids: Sequence[int], step: int) -> None:
    """Remove points after ``step`` and rebuild the rollups that held them."""
    for key_id in key_ids:
        sql.execute(
            session, "DELETE FROM point_chunks WHERE key_id = ? AND first_step > ?", (key_id, step)
        )
        holding = sql.fetchall(
            session,
            "SELECT first_step, last_step, step_data, value_data, time_data FROM point_chunks "
            "WHERE key_id = ? AND first_step <= ? ORDER BY first_step DESC LIMIT 1",
            (key_id, step),
        )
        if holding and holding[0][1] > step:
            first, _, step_data, value_data, time_data = holding[0]
            kept = [row for row in decode(step_data, value_data, time_data) if row[0] <= step]
            _replace_chunk(session, key_id, first, kept)
        for level, width in enumerate(BUCKET_WIDTHS):
            sql.execute(
                session,
                "DELETE FROM rollups WHERE key_id = ? AND level = ? AND bucket > ?",
                (key_id, level, step // width),
            )
        recompute_rollups(session, key_id, [step])
