"""Sessions, messages with FTS5, state_meta and per-source counters.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

from shared.db import sqlite as sqlite_ddl

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("user_id", sa.Text),
        sa.Column("session_key", sa.Text),
        sa.Column("chat_id", sa.Text),
        sa.Column("chat_type", sa.Text),
        sa.Column("thread_id", sa.Text),
        sa.Column("title", sa.Text),
        sa.Column("title_source", sa.Text),
        sa.Column("model", sa.Text),
        sa.Column("model_config", sa.Text),
        sa.Column("system_prompt", sa.Text),
        sa.Column("parent_session_id", sa.Text, sa.ForeignKey("sessions.id", ondelete="SET NULL")),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("ended_at", sa.Float),
        sa.Column("end_reason", sa.Text),
        sa.Column("last_active_at", sa.Float, nullable=False),
        sa.Column("message_count", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("input_tokens", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("output_tokens", sa.Integer, nullable=False, server_default=sa.text("0")),
    )
    op.create_index("ix_sessions_last_active", "sessions", ["last_active_at"])
    op.create_index("ix_sessions_source_last_active", "sessions", ["source", "last_active_at"])
    op.create_index("ix_sessions_parent", "sessions", ["parent_session_id"])
    op.create_index("ix_sessions_session_key", "sessions", ["session_key", "started_at"])
    op.create_index(
        "ix_sessions_ended",
        "sessions",
        ["ended_at"],
        sqlite_where=sa.text("ended_at IS NOT NULL"),
        postgresql_where=sa.text("ended_at IS NOT NULL"),
    )
    op.create_index(
        "ux_sessions_title",
        "sessions",
        ["title"],
        unique=True,
        sqlite_where=sa.text("title IS NOT NULL"),
        postgresql_where=sa.text("title IS NOT NULL"),
    )
    op.create_table(
        "messages",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "session_id",
            sa.Text,
            sa.ForeignKey("sessions.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("role", sa.Text, nullable=False),
        sa.Column("content", sa.Text),
        sa.Column("tool_calls", sa.Text),
        sa.Column("tool_call_id", sa.Text),
        sa.Column("tool_name", sa.Text),
        sa.Column("token_count", sa.Integer),
        sa.Column("timestamp", sa.Float, nullable=False),
        sa.Column("platform_message_id", sa.Text),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_messages_session", "messages", ["session_id", "id"])
    op.create_table(
        "state_meta",
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("value", sa.Text),
    )
    op.create_table(
        "source_stats",
        sa.Column("source", sa.Text, primary_key=True),
        sa.Column("sessions", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("messages", sa.Integer, nullable=False, server_default=sa.text("0")),
    )
    if op.get_context().dialect.name == "sqlite":
        for statement in [
            sqlite_ddl.FTS_SOURCE_VIEW,
            sqlite_ddl.FTS_TABLE,
            *sqlite_ddl.FTS_TRIGGERS,
            *sqlite_ddl.FTS_TUNING,
            *sqlite_ddl.COUNTER_TRIGGERS,
        ]:
            op.execute(statement)


def downgrade() -> None:
    raise NotImplementedError("hermes-fleet schemas only move forward; restore a backup instead")
