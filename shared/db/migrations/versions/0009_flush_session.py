"""A reset's memory-flush turn names the session it was queued for in a column of its own
(it was read back out of the turn's event id, `reset-memory:<session>:<activity>`).

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_inbox = sa.table(
    "inbox",
    sa.column("id", sa.Integer),
    sa.column("kind", sa.Text),
    sa.column("event_id", sa.Text),
    sa.column("status", sa.Text),
    sa.column("flush_session_id", sa.Text),
)


def upgrade() -> None:
    with op.batch_alter_table("inbox") as batch:
        batch.add_column(sa.Column("flush_session_id", sa.Text))
    # Memory turns still waiting get their session from the event id they were recorded with.
    conn = op.get_bind()
    waiting = conn.execute(
        sa.select(_inbox.c.id, _inbox.c.event_id).where(
            _inbox.c.kind == "memory_flush", _inbox.c.status.in_(("waiting", "running"))
        )
    ).all()
    for turn_id, event_id in waiting:
        parts = str(event_id).split(":")
        if len(parts) >= 3 and parts[0] == "reset-memory":
            conn.execute(
                sa.update(_inbox).where(_inbox.c.id == turn_id).values(flush_session_id=parts[1])
            )


def downgrade() -> None:
    with op.batch_alter_table("inbox") as batch:
        batch.drop_column("flush_session_id")
