"""PostgreSQL keeps `sessions.message_count` by trigger too, and counts what was missed.

Until now only SQLite's triggers (revision 0001) kept it: on PostgreSQL every session read 0
messages, so listings, stats, prune and resume took real sessions for empty ones. The
triggers and the backfill are in shared/db/postgresql.py; SQLite files change nothing here.

Revision ID: 0011
Revises: 0010
"""

from alembic import op

from shared.db import postgresql as postgresql_ddl

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    for statement in [
        *postgresql_ddl.COUNTER_FUNCTIONS,
        *postgresql_ddl.COUNTER_TRIGGERS,
        postgresql_ddl.COUNTER_BACKFILL,
    ]:
        op.execute(statement)


def downgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    for statement in postgresql_ddl.COUNTER_DROP:
        op.execute(statement)
