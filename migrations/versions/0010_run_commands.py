"""run_commands and command_policies: stop and checkpoint requests for a run's trainer.

A command records who asked (a person, or a project's policy), when and why, the step the run
had reached, when the trainer's hook received it and when the trainer acted on it; a dry-run
policy's commands are recorded and never sent. A policy asks on its own when an alert reaches a
severity and persists some steps. The downgrade drops both tables.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "command_policies",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("project", sa.String(length=128), nullable=False),
        sa.Column("alert", sa.String(length=128), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("persist_steps", sa.Integer(), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("dry_run", sa.Boolean(), nullable=False),
        sa.Column("created_by", sa.String(length=256), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_command_policies")),
    )
    op.create_index(
        op.f("ix_command_policies_project"), "command_policies", ["project"], unique=False
    )
    op.create_table(
        "run_commands",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=128), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("requested_by", sa.String(length=256), nullable=False),
        sa.Column("alert_id", sa.Integer(), nullable=True),
        sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("requested_step", sa.BigInteger(), nullable=True),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("acted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("acted_step", sa.BigInteger(), nullable=True),
        sa.Column("policy_id", sa.Integer(), nullable=True),
        sa.Column("dry_run", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_run_commands_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run_commands")),
    )
    op.create_index(op.f("ix_run_commands_run_id"), "run_commands", ["run_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_run_commands_run_id"), table_name="run_commands")
    op.drop_table("run_commands")
    op.drop_index(op.f("ix_command_policies_project"), table_name="command_policies")
    op.drop_table("command_policies")
