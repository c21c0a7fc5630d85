"""alerts.closed_with_run: an alert resolved because its run ended, not because it cleared.

A run that finishes, stops or fails closes its open alerts: they leave the inbox and stay in
the run's history. Older alerts read false. The downgrade drops the column.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("alerts") as batch:
        batch.add_column(
            sa.Column("closed_with_run", sa.Boolean(), server_default=sa.false(), nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("alerts") as batch:
        batch.drop_column("closed_with_run")
