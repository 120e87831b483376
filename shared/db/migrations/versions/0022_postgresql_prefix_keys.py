"""Prefixes on PostgreSQL: a GIN index of each conversation message's words by their first four
characters and the message's id bucket (see `shared.search.postgresql.ddl`), so a prefix query
reads the matches of the newest ids' buckets instead of GIN's bitmap of every word the prefix
expands to, over every id, for each statement. SQLite's FTS5 has its own `prefix` option and
orders by rowid itself: no-op there.

Building the index reads every conversation message's words once.

Revision ID: 0022
Revises: 0021
"""

from alembic import op

from shared.search.postgresql import ddl as postgresql_search_ddl

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    for statement in postgresql_search_ddl.CREATE_PREFIXES:
        op.execute(statement)


def downgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    for statement in postgresql_search_ddl.DROP_PREFIXES:
        op.execute(statement)
