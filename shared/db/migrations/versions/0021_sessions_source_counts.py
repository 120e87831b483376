"""`sessions stats` on PostgreSQL from an index alone: the (source, last_active_at, id) index
also carries `message_count`, so the per-source count and sum are read from the index in
source order instead of from every sessions row (system prompts and all).

PostgreSQL keeps no per-source counter row (every append would queue on it); SQLite keeps
`source_stats` by trigger and has no INCLUDE: no-op there. The index already takes a new
entry on every append (last_active_at changes), so carrying the count costs appends nothing
more than a few bytes.

Revision ID: 0021
Revises: 0020
"""

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

NAME = "ix_sessions_source_last_active"
COLUMNS = ["source", "last_active_at", "id"]


def upgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    op.drop_index(NAME, table_name="sessions")
    op.create_index(NAME, "sessions", COLUMNS, postgresql_include=["message_count"])


def downgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    op.drop_index(NAME, table_name="sessions")
    op.create_index(NAME, "sessions", COLUMNS)
