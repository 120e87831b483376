"""When, and by which arrival, a wake-up for a key was sent and not yet taken (coalesces
wake-ups).

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("routes") as batch:
        batch.add_column(sa.Column("wake_sent_at", sa.Float))
        batch.add_column(sa.Column("wake_seq", sa.Integer))


def downgrade() -> None:
    with op.batch_alter_table("routes") as batch:
        batch.drop_column("wake_seq")
        batch.drop_column("wake_sent_at")
