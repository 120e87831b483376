"""Handoffs remember who claimed them (`claimed_by`: host and process), so a worker starting on
that host fails the ones its dead predecessor left running; a route remembers the handoff that
made its room key shared by everyone in the room (`shared_by_handoff`), until it lets go of the
session.

Revision ID: 0015
Revises: 0014
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("handoffs") as batch:
        batch.add_column(sa.Column("claimed_by", sa.Text))
    with op.batch_alter_table("routes") as batch:
        batch.add_column(sa.Column("shared_by_handoff", sa.Integer))


def downgrade() -> None:
    with op.batch_alter_table("routes") as batch:
        batch.drop_column("shared_by_handoff")
    with op.batch_alter_table("handoffs") as batch:
        batch.drop_column("claimed_by")
