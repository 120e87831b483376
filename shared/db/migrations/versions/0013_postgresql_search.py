"""Search on PostgreSQL: a tsvector word index and a 1-2 character substring index (see
`shared.search.postgresql.ddl`). SQLite has had its FTS5 indexes since 0001/0003: no-op there.

Revision ID: 0013
Revises: 0010
"""

from alembic import op

from shared.search.postgresql import ddl as postgresql_search_ddl

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    for statement in postgresql_search_ddl.CREATE_ALL:
        op.execute(statement)


def downgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    for statement in postgresql_search_ddl.DROP_ALL:
        op.execute(statement)
