"""Media in object storage: a blob whose bytes live in an S3-compatible store (`media.url`)
keeps its row here (digest, size, type, references) with empty `data` and the store's URL in
`location`; NULL `location` means the bytes are in `data`, as every blob before this revision.

A column added, not `data` made nullable: on SQLite that would rebuild `media_blobs`, and
dropping the old table would cascade into `media_refs`.

Revision ID: 0018
Revises: 0017
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("media_blobs", sa.Column("location", sa.Text))


def downgrade() -> None:
    # Plain DROP COLUMN (SQLite >= 3.35): a batch rebuild would cascade into media_refs.
    op.execute("ALTER TABLE media_blobs DROP COLUMN location")
