"""Phrases on PostgreSQL: a GIN index of each message's adjacent word pairs (see
`shared.search.postgresql.ddl`), so a phrase narrows to the rows holding its pairs instead of
re-reading every row that holds its words. SQLite's FTS5 keeps positions itself: no-op there.

Building the index reads every conversation message once (5 minutes for 1.5M messages here).

Revision ID: 0020
Revises: 0019
"""

from alembic import op

from shared.search.postgresql import ddl as postgresql_search_ddl

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    for statement in postgresql_search_ddl.CREATE_PAIRS:
        op.execute(statement)


def downgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    for statement in postgresql_search_ddl.DROP_PAIRS:
        op.execute(statement)
