"""Rollout samples beside the points: numbers in columns, text and tokens zlib-compressed.

A sample is keyed by (run, split, step, index): ``split`` keeps validation generations apart
from the training rollouts of the same step.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NUMBER_COLUMNS = (
    "reward",
    "advantage",
    "length",
    "truncated",
    "group_id",
    "logprob",
    "entropy",
    "kl",
)


def upgrade() -> None:
    op.create_table(
        "samples",
        sa.Column("run_id", sa.String(length=128), nullable=False),
        sa.Column("split", sa.String(length=32), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("sample_index", sa.Integer(), nullable=False),
        sa.Column("wall_time", sa.Double(), nullable=True),
        *(sa.Column(name, sa.Double(), nullable=True) for name in NUMBER_COLUMNS),
        sa.Column("cut", sa.Boolean(), nullable=False),
        sa.Column("text_data", sa.LargeBinary(), nullable=False),
        sa.Column("token_data", sa.LargeBinary(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_samples_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", "split", "step", "sample_index", name=op.f("pk_samples")),
    )
    op.create_index("ix_samples_run_reward", "samples", ["run_id", "split", "reward"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_samples_run_reward", table_name="samples")
    op.drop_table("samples")
