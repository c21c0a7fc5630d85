"""runs.client_drops: what the run's trainer processes dropped without delivering.

One entry per reporting process, ``{process: {"points", "steps", "samples"}}``, each a count
since that process started (so a report sent twice, or late, changes nothing). Existing runs
get none (null: nothing reported). The downgrade drops the column in place (ALTER TABLE ... DROP
COLUMN, SQLite 3.35 or later): a batch-mode copy of ``runs`` would drop the old table, and with
foreign keys on SQLite deletes every row that cascades from it (keys, points, alerts).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-08
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("client_drops", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "client_drops")
