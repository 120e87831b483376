"""The turn pipeline: routes (session key → session, lease), inbox, outbox, leases.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "routes",
        sa.Column("session_key", sa.Text, primary_key=True),
        sa.Column("session_id", sa.Text, sa.ForeignKey("sessions.id", ondelete="SET NULL")),
        sa.Column("platform", sa.Text, nullable=False),
        sa.Column("chat_id", sa.Text, nullable=False),
        sa.Column("chat_type", sa.Text, nullable=False),
        sa.Column("thread_id", sa.Text),
        sa.Column("user_id", sa.Text),
        sa.Column("next_seq", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("lease_holder", sa.Text),
        sa.Column("lease_expires_at", sa.Float),
        sa.Column("fence", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("stop_requested_at", sa.Float),
        sa.Column("pending_title", sa.Text),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_index("ix_routes_session", "routes", ["session_id"])
    op.create_table(
        "inbox",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("platform", sa.Text, nullable=False),
        sa.Column("event_id", sa.Text, nullable=False),
        sa.Column("session_key", sa.Text, sa.ForeignKey("routes.session_key"), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("kind", sa.Text, nullable=False, server_default=sa.text("'message'")),
        sa.Column("chat_id", sa.Text, nullable=False),
        sa.Column("chat_type", sa.Text, nullable=False),
        sa.Column("thread_id", sa.Text),
        sa.Column("user_id", sa.Text),
        sa.Column("user_name", sa.Text),
        sa.Column("message_id", sa.Text),
        sa.Column("reply_to", sa.Text),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("attachments", sa.Text),
        sa.Column("status", sa.Text, nullable=False, server_default=sa.text("'waiting'")),
        sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("not_before", sa.Float),
        sa.Column("session_id", sa.Text),
        sa.Column("error", sa.Text),
        sa.Column("received_at", sa.Float, nullable=False),
        sa.Column("started_at", sa.Float),
        sa.Column("finished_at", sa.Float),
        sqlite_autoincrement=True,
    )
    op.create_index("ux_inbox_event", "inbox", ["platform", "event_id"], unique=True)
    op.create_index("ux_inbox_key_seq", "inbox", ["session_key", "seq"], unique=True)
    op.create_index("ix_inbox_status", "inbox", ["status", "received_at"])
    open_only = sa.text("status IN ('waiting', 'running')")
    op.create_index(
        "ix_inbox_open",
        "inbox",
        ["session_key", "seq"],
        sqlite_where=open_only,
        postgresql_where=open_only,
    )
    op.create_table(
        "outbox",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("lane", sa.Text, nullable=False),
        sa.Column("turn_id", sa.Integer, sa.ForeignKey("inbox.id", ondelete="SET NULL")),
        sa.Column("session_id", sa.Text),
        sa.Column("platform", sa.Text, nullable=False),
        sa.Column("chat_id", sa.Text, nullable=False),
        sa.Column("thread_id", sa.Text),
        sa.Column("reply_to", sa.Text),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False, server_default=sa.text("'pending'")),
        sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("not_before", sa.Float),
        sa.Column("platform_message_id", sa.Text),
        sa.Column("error", sa.Text),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("sent_at", sa.Float),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_outbox_lane", "outbox", ["lane", "status", "id"])
    op.create_index("ix_outbox_status", "outbox", ["status", "created_at"])
    op.create_table(
        "leases",
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("holder", sa.Text),
        sa.Column("expires_at", sa.Float),
        sa.Column("fence", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("cooldown_until", sa.Float),
    )


def downgrade() -> None:
    raise NotImplementedError("hermes-fleet schemas only move forward; restore a backup instead")
