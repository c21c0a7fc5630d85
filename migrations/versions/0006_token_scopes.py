"""api_tokens: a lookup id, a per-token salt and a scope (read, write, admin).

No earlier version issued tokens, so the table is empty; rows without a lookup id and a salt
could never be checked, and the upgrade deletes any. The downgrade drops the three columns
(the older code has no tokens to check).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("DELETE FROM api_tokens")
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("lookup", sa.String(length=8), nullable=False))
        batch.add_column(sa.Column("salt", sa.String(length=32), nullable=False))
        batch.add_column(sa.Column("scope", sa.String(length=8), nullable=False))
        batch.create_unique_constraint(batch.f("uq_api_tokens_lookup"), ["lookup"])


def downgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_constraint(batch.f("uq_api_tokens_lookup"), type_="unique")
        batch.drop_column("scope")
        batch.drop_column("salt")
        batch.drop_column("lookup")
