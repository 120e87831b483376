"""Cron agent jobs and their runs (unique per job and slot).

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cron_jobs",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("schedule", sa.Text, nullable=False),
        sa.Column("timezone", sa.Text, nullable=False),
        sa.Column("prompt", sa.Text, nullable=False),
        sa.Column("deliver_platform", sa.Text),
        sa.Column("deliver_chat", sa.Text),
        sa.Column("paused", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("last_slot", sa.Float),
    )
    op.create_index("ux_cron_jobs_name", "cron_jobs", ["name"], unique=True)
    op.create_table(
        "cron_runs",
        sa.Column(
            "job_id",
            sa.Text,
            sa.ForeignKey("cron_jobs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("slot", sa.Float, primary_key=True),
        sa.Column("turn_id", sa.Integer),
        sa.Column("manual", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("created_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    raise NotImplementedError("hermes-fleet schemas only move forward; restore a backup instead")
