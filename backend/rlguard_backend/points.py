"""Storage verbs for points and their rollups. No commits here: the caller owns the transaction."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from sqlalchemy.orm import Session

from rlguard_backend import sql
from rlguard_backend.rollups import BUCKET_WIDTHS, Summary, bucket_points, group_by_bucket

POINT_COLUMNS = (("key_id", "int4"), ("step", "int8"), ("value", "float8"), ("wall_time", "float8"))
POINTS_ON_CONFLICT = (
    "ON CONFLICT (key_id, step) DO UPDATE SET "
    "value = excluded.value, wall_time = excluded.wall_time"
)
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

KeyPoints = Mapping[int, Sequence[tuple[int, float | None, float | None]]]


def upsert_points(session: Session, points: KeyPoints) -> None:
    """Write ``{key_id: [(step, value, wall_time), ...]}``; a later write of a step wins."""
    rows = [(key_id, s, v, t) for key_id, items in points.items() for s, v, t in items]
    sql.bulk_insert(session, "points", POINT_COLUMNS, rows, POINTS_ON_CONFLICT)


def _upsert_rollups(session: Session, rows: list[tuple[object, ...]]) -> None:
    columns = ROLLUP_KEY_COLUMNS + SUMMARY_COLUMNS
    sql.bulk_insert(session, "rollups", columns, rows, ROLLUPS_ON_CONFLICT)


def update_rollups(
    session: Session, points: KeyPoints, previous_last_step: Mapping[int, int | None]
) -> None:
    """Bring every level's buckets up to date after ``points`` were upserted."""
    appended: dict[int, list[tuple[int, float | None]]] = {}
    rewritten: dict[int, set[int]] = {}
    for key_id, items in points.items():
        last = previous_last_step.get(key_id)
        if last is None or items[0][0] > last:
            appended[key_id] = [(s, v) for s, v, _ in items]
        else:
            rewritten[key_id] = {s for s, _, _ in items}
    _append_rollups(session, appended)
    for key_id, steps in rewritten.items():
        recompute_rollups(session, key_id, steps)


def _append_rollups(
    session: Session, appended: Mapping[int, Sequence[tuple[int, float | None]]]
) -> None:
    """Fast path for steps past a key's last step: summarize them, merge in SQL, read nothing."""
    rows: list[tuple[object, ...]] = []
    for key_id, items in appended.items():
        finest = bucket_points(items, BUCKET_WIDTHS[0])
        for level, width in enumerate(BUCKET_WIDTHS):
            if level == 0:
                level_buckets = finest
            else:
                level_buckets = group_by_bucket(((s.first_step, s) for s in finest.values()), width)
            rows.extend(
                (key_id, level, bucket, *summary.as_row())
                for bucket, summary in level_buckets.items()
            )
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


def read_points(
    session: Session, key_id: int, lo: int, hi: int
) -> list[tuple[int, float | None, float | None]]:
    """Raw ``(step, value, wall_time)`` with ``lo <= step <= hi``, in step order."""
    return sql.fetchall(
        session,
        "SELECT step, value, wall_time FROM points WHERE key_id = ? AND step >= ? AND step <= ? "
        "ORDER BY step",
        (key_id, lo, hi),
    )


def read_times(session: Session, key_id: int, steps: Sequence[int]) -> list[float | None]:
    """Wall times of the given steps of one key, in the order given."""
    times: dict[int, float | None] = {}
    for start in range(0, len(steps), 500):
        chunk = steps[start : start + 500]
        rows = sql.fetchall(
            session,
            "SELECT step, wall_time FROM points WHERE key_id = ? "
            f"AND step IN ({sql.placeholders(len(chunk))})",
            (key_id, *chunk),
        )
        times.update(rows)
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


def delete_after(session: Session, key_ids: Sequence[int], step: int) -> None:
    """Remove points after ``step`` and rebuild the rollups that held them."""
    for key_id in key_ids:
        sql.execute(session, "DELETE FROM points WHERE key_id = ? AND step > ?", (key_id, step))
        for level, width in enumerate(BUCKET_WIDTHS):
            sql.execute(
                session,
                "DELETE FROM rollups WHERE key_id = ? AND level = ? AND bucket > ?",
                (key_id, level, step // width),
            )
        recompute_rollups(session, key_id, [step])
