"""detector_state.generation: the id of the last write, in a column of its own.

A service process that fed a run's last batch checks it before each batch to know whether its
cached suite is still current; reading it out of the state's JSON made SQLite parse the whole
state (about 8 KB) per batch. Existing rows keep NULL until their next write, which a cache
miss then rebuilds from the stored state as before. The downgrade drops the column: the older
code finds no generation in the JSON and reloads the state on each batch, which stays correct.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("detector_state") as batch:
        batch.add_column(sa.Column("generation", sa.String(length=32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("detector_state") as batch:
        batch.drop_column("generation")
