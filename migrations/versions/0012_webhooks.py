"""webhooks: hooks managed over REST, and the outbox row's hook.

A stored hook's outbox rows name it (``hook_id``) and are deleted with it; rows of the
server-wide hooks (``RLGUARD_WEBHOOKS``) keep a null ``hook_id``. The downgrade drops the
table and the column (stored hooks are lost).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "webhooks",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("project", sa.String(length=128), nullable=True),
        sa.Column("url", sa.String(length=2048), nullable=False),
        sa.Column("format", sa.String(length=16), nullable=False),
        sa.Column("min_severity", sa.String(length=16), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("secret", sa.String(length=128), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(length=128), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhooks")),
    )
    with op.batch_alter_table("webhook_outbox", schema=None) as batch_op:
        batch_op.add_column(sa.Column("hook_id", sa.Integer(), nullable=True))
        batch_op.create_index(batch_op.f("ix_webhook_outbox_hook_id"), ["hook_id"], unique=False)
        batch_op.create_foreign_key(
            batch_op.f("fk_webhook_outbox_hook_id_webhooks"),
            "webhooks",
            ["hook_id"],
            ["id"],
            ondelete="CASCADE",
        )


def downgrade() -> None:
    with op.batch_alter_table("webhook_outbox", schema=None) as batch_op:
        batch_op.drop_constraint(
            batch_op.f("fk_webhook_outbox_hook_id_webhooks"), type_="foreignkey"
        )
        batch_op.drop_index(batch_op.f("ix_webhook_outbox_hook_id"))
        batch_op.drop_column("hook_id")
    op.drop_table("webhooks")
