"""Points packed into chunks: one row per key per batch instead of one per point.

Existing points move into chunks of up to 256 points each; the downgrade unpacks them again.
The packing is written out here (not imported from the application) so that this migration
keeps meaning what it means when the application's code changes.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

import math
import sys
from array import array
from collections.abc import Iterator, Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHUNK_POINTS = 256
_SWAP = sys.byteorder != "little"

chunks = sa.table(
    "point_chunks",
    sa.column("key_id", sa.Integer()),
    sa.column("first_step", sa.BigInteger()),
    sa.column("last_step", sa.BigInteger()),
    sa.column("count", sa.Integer()),
    sa.column("step_data", sa.LargeBinary()),
    sa.column("value_data", sa.LargeBinary()),
    sa.column("time_data", sa.LargeBinary()),
)
points = sa.table(
    "points",
    sa.column("key_id", sa.Integer()),
    sa.column("step", sa.BigInteger()),
    sa.column("value", sa.Double()),
    sa.column("wall_time", sa.Double()),
)


def _pack(code: str, numbers: list[float] | list[int]) -> bytes:
    packed = array(code, numbers)
    if _SWAP:
        packed.byteswap()
    return packed.tobytes()


def _unpack(code: str, blob: bytes) -> list[float] | list[int]:
    unpacked = array(code)
    unpacked.frombytes(blob)
    if _SWAP:
        unpacked.byteswap()
    return unpacked.tolist()


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


def _none(value: float) -> float | None:
    return None if value != value else value


def _key_pages(connection: sa.Connection) -> Iterator[tuple[int, Sequence[sa.Row]]]:
    """Each key's points in step order, CHUNK_POINTS at a time (memory stays flat)."""
    key_ids = [r[0] for r in connection.execute(sa.text("SELECT DISTINCT key_id FROM points"))]
    for key_id in key_ids:
        after = -(2**63)
        while True:
            page = connection.execute(
                sa.text(
                    "SELECT step, value, wall_time FROM points WHERE key_id = :key "
                    "AND step > :after ORDER BY step LIMIT :limit"
                ),
                {"key": key_id, "after": after, "limit": CHUNK_POINTS},
            ).all()
            if not page:
                break
            yield key_id, page
            after = page[-1][0]


def upgrade() -> None:
    op.create_table(
        "point_chunks",
        sa.Column("key_id", sa.Integer(), nullable=False),
        sa.Column("first_step", sa.BigInteger(), nullable=False),
        sa.Column("last_step", sa.BigInteger(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("step_data", sa.LargeBinary(), nullable=False),
        sa.Column("value_data", sa.LargeBinary(), nullable=False),
        sa.Column("time_data", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("key_id", "first_step", name=op.f("pk_point_chunks")),
    )
    with op.batch_alter_table("metric_keys", schema=None) as batch_op:
        batch_op.add_column(sa.Column("tail_step", sa.BigInteger(), nullable=True))
        batch_op.add_column(
            sa.Column("tail_count", sa.Integer(), server_default="0", nullable=False)
        )
    connection = op.get_bind()
    for key_id, part in _key_pages(connection):
        connection.execute(
            chunks.insert(),
            {
                "key_id": key_id,
                "first_step": part[0][0],
                "last_step": part[-1][0],
                "count": len(part),
                "step_data": _pack("q", [r[0] for r in part]),
                "value_data": _pack("d", [_nan(r[1]) for r in part]),
                "time_data": _pack("d", [_nan(r[2]) for r in part]),
            },
        )
        # Pages arrive in step order: the last one written for a key is its tail.
        connection.execute(
            sa.text(
                "UPDATE metric_keys SET tail_step = :step, tail_count = :count WHERE id = :key"
            ),
            {"step": part[0][0], "count": len(part), "key": key_id},
        )
    op.drop_table("points")


def downgrade() -> None:
    op.create_table(
        "points",
        sa.Column("key_id", sa.Integer(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("value", sa.Double(), nullable=True),
        sa.Column("wall_time", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("key_id", "step", name=op.f("pk_points")),
        sqlite_with_rowid=False,
    )
    connection = op.get_bind()
    key_ids = [r[0] for r in connection.execute(sa.text("SELECT id FROM metric_keys"))]
    for key_id in key_ids:
        stored = connection.execute(
            sa.text(
                "SELECT first_step, step_data, value_data, time_data FROM point_chunks "
                "WHERE key_id = :key ORDER BY first_step"
            ),
            {"key": key_id},
        ).all()
        for _first, step_data, value_data, time_data in stored:
            steps, values = _unpack("q", step_data), _unpack("d", value_data)
            times = _unpack("d", time_data)
            connection.execute(
                points.insert(),
                [
                    {"key_id": key_id, "step": s, "value": _none(v), "wall_time": _none(t)}
                    for s, v, t in zip(steps, values, times, strict=True)
                ],
            )
    with op.batch_alter_table("metric_keys", schema=None) as batch_op:
        batch_op.drop_column("tail_count")
        batch_op.drop_column("tail_step")
    op.drop_table("point_chunks")
