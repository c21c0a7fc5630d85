"""Alert keys (one open alert per run, detector and key) and the webhook outbox.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "webhook_outbox",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("alert_id", sa.Integer(), nullable=False),
        sa.Column("change", sa.String(length=64), nullable=False),
        sa.Column("target", sa.String(length=512), nullable=False),
        sa.Column("format", sa.String(length=16), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["alert_id"],
            ["alerts.id"],
            name=op.f("fk_webhook_outbox_alert_id_alerts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_outbox")),
        sa.UniqueConstraint(
            "alert_id", "change", "target", name=op.f("uq_webhook_outbox_alert_id")
        ),
    )
    with op.batch_alter_table("webhook_outbox", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_webhook_outbox_next_attempt_at"), ["next_attempt_at"], unique=False
        )

    with op.batch_alter_table("alerts", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("key", sa.String(length=128), server_default="", nullable=False)
        )
        batch_op.create_index(
            "ix_alerts_run_detector_key", ["run_id", "detector", "key", "status"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("alerts", schema=None) as batch_op:
        batch_op.drop_index("ix_alerts_run_detector_key")
        batch_op.drop_column("key")

    with op.batch_alter_table("webhook_outbox", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_webhook_outbox_next_attempt_at"))

    op.drop_table("webhook_outbox")
