"""runs.archived_at: an archived run is kept whole but left out of the run and alert lists.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Plain ALTER TABLE, not batch mode: on SQLite a batch copies and drops ``runs``, and the drop
# would cascade to every table that references it (SQLite 3.35 drops a column in place).


def upgrade() -> None:
    op.add_column("runs", sa.Column("archived_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "archived_at")
