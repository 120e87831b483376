"""Memories: durable notes the agent keeps about a user (platform + user id), across sessions.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "memories",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("owner", sa.Text, nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("session_id", sa.Text, sa.ForeignKey("sessions.id", ondelete="SET NULL")),
        sa.Column("created_at", sa.Float, nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_memories_owner", "memories", ["owner", "id"])


def downgrade() -> None:
    raise NotImplementedError("hermes-fleet schemas only move forward; restore a backup instead")
