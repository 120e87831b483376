"""Counts and token totals are 64-bit on PostgreSQL, as they always were on SQLite.

SQLite's INTEGER holds any 64-bit value; PostgreSQL's is 32-bit, so a session whose model
reported 2^31 tokens or more (or an export from SQLite carrying one) was refused there with
"integer out of range". SQLite needs no change (its column types do not limit values).

Revision ID: 0012
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

# (table, column) that grow without bound.
WIDENED = (
    ("sessions", "message_count"),
    ("sessions", "input_tokens"),
    ("sessions", "output_tokens"),
    ("messages", "token_count"),
    ("source_stats", "sessions"),
    ("source_stats", "messages"),
)


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        return
    for table, column in WIDENED:
        op.alter_column(table, column, type_=sa.BigInteger(), existing_type=sa.Integer())


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        return
    for table, column in WIDENED:
        op.alter_column(table, column, type_=sa.Integer(), existing_type=sa.BigInteger())
