"""Media blobs: attachments and derived media stored in the database, content-addressed by
sha256, with one reference row per (blob, session) so delete and prune remove a blob with its
last session. Nothing about a turn's media is a path on one host any more.

Older installations keep what they had: files under `$HERMES_HOME/media/` stay where they are
and transcripts that name them are left as written; terminal turns still waiting in the inbox
with a local `path` are read from that path by a worker on the same host.

Revision ID: 0017
Revises: 0016
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "media_blobs",
        sa.Column("sha256", sa.Text, primary_key=True),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("media_type", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_media_blobs_created", "media_blobs", ["created_at"])
    op.create_table(
        "media_refs",
        sa.Column(
            "sha256",
            sa.Text,
            sa.ForeignKey("media_blobs.sha256", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("session_id", sa.Text, primary_key=True),
        sa.Column("name", sa.Text),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_media_refs_session", "media_refs", ["session_id"])


def downgrade() -> None:
    op.drop_index("ix_media_refs_session", table_name="media_refs")
    op.drop_table("media_refs")
    op.drop_index("ix_media_blobs_created", table_name="media_blobs")
    op.drop_table("media_blobs")
