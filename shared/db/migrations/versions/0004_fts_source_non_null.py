"""The FTS content view leaves out messages without content, as the triggers always did.

Revision 0001's view offered NULL-content rows (tool-call-only turns) that the triggers never
indexed, so FTS5's 'integrity-check' reported a mismatch on any real chat. Only the view
changes; the index already holds exactly the non-NULL rows.

Revision ID: 0004
Revises: 0003
"""

from alembic import op

from shared.db import sqlite as sqlite_ddl

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_context().dialect.name != "sqlite":
        return
    op.execute("DROP VIEW IF EXISTS messages_fts_source")
    op.execute(sqlite_ddl.FTS_SOURCE_VIEW)


def downgrade() -> None:
    raise NotImplementedError("hermes-fleet schemas only move forward; restore a backup instead")
