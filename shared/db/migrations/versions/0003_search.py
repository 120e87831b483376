"""Search: a trigram index for unsegmented scripts (Chinese, Japanese, Thai...), a role index.

Revision ID: 0003
Revises: 0002
"""

from alembic import op

from shared.search.sqlite import ddl as sqlite_search_ddl

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Windows and their before/after counts filter by role: with the role in the index they
    # are read from it alone, however long the session (a scroll has a 2 ms budget).
    op.create_index("ix_messages_session_role", "messages", ["session_id", "id", "role"])
    if op.get_context().dialect.name != "sqlite":
        return
    for statement in sqlite_search_ddl.CREATE_ALL:
        op.execute(statement)
    op.execute(sqlite_search_ddl.CJK_BACKFILL)


def downgrade() -> None:
    raise NotImplementedError("hermes-fleet schemas only move forward; restore a backup instead")
