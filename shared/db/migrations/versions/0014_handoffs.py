"""Handoffs: one row per `/handoff <platform>` request, with its state (pending → running →
completed | failed, and the error), so the terminal can wait on it and one worker claims it.

Revision ID: 0014
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "handoffs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.Text, nullable=False),
        sa.Column("source_key", sa.Text, nullable=False),
        sa.Column("platform", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("chat_id", sa.Text),
        sa.Column("thread_id", sa.Text),
        sa.Column("target_key", sa.Text),
        sa.Column("requested_at", sa.Float, nullable=False),
        sa.Column("deadline", sa.Float, nullable=False),
        sa.Column("claimed_at", sa.Float),
        sa.Column("finished_at", sa.Float),
    )
    op.create_index("ix_handoffs_session", "handoffs", ["session_id", "status"])
    op.create_index("ix_handoffs_status", "handoffs", ["status"])


def downgrade() -> None:
    op.drop_table("handoffs")  # its indexes with it
