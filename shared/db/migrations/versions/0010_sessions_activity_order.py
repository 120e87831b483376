"""The activity indexes carry the listing's whole order (last_active_at, id): a deep page of
`sessions list` is picked from the index alone instead of reading and sorting every session
before it (22 ms at offset 10,000 of 21,000 sessions).

Revision ID: 0010
Revises: 0009
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_sessions_last_active", table_name="sessions")
    op.drop_index("ix_sessions_source_last_active", table_name="sessions")
    op.create_index("ix_sessions_last_active", "sessions", ["last_active_at", "id"])
    op.create_index(
        "ix_sessions_source_last_active", "sessions", ["source", "last_active_at", "id"]
    )


def downgrade() -> None:
    op.drop_index("ix_sessions_source_last_active", table_name="sessions")
    op.drop_index("ix_sessions_last_active", table_name="sessions")
    op.create_index("ix_sessions_last_active", "sessions", ["last_active_at"])
    op.create_index("ix_sessions_source_last_active", "sessions", ["source", "last_active_at"])
