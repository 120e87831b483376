"""PostgreSQL's search index functions in plpgsql: the same queries, the same results, so the
indexes built on them stay valid and are not rebuilt.

As LANGUAGE sql functions with a FROM or a subquery they are not inlined, and the server
planned each body again in every statement that called it: for the index expressions that is
every INSERT of a message, three plans each time (`ddl._function`). SQLite has FTS5: no-op
there.

Revision ID: 0023
Revises: 0022
"""

from alembic import op

from shared.search.postgresql import ddl as postgresql_search_ddl

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    for statement in postgresql_search_ddl.PLPGSQL:
        op.execute(statement)


def downgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    for statement in postgresql_search_ddl.SQL:
        op.execute(statement)
