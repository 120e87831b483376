"""The fleet-wide usage rollups split into shards: `shard` joins the primary keys of
`usage_daily` and `usage_tools`.

Every model call adds to its day × platform × model × kind row inside the turn's transaction.
On PostgreSQL that row's lock is then held until the turn commits, so every worker of the
fleet queued on one row (measured: 100 ms of lock wait per turn at 16 threads, the pipeline's
limit). A call now adds to one of `shared.store.usage.SHARDS` rows chosen by its session, and
reports sum the shards (they always grouped and summed). Existing rows become shard 0.

Revision ID: 0019
Revises: 0018
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

KEYS = {
    "usage_daily": ["day", "platform", "model", "kind"],
    "usage_tools": ["day", "platform", "model", "tool"],
}


def _shard(*, primary_key: bool) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(
        "shard",
        sa.SmallInteger,
        primary_key=primary_key,
        nullable=False,
        server_default=sa.text("0"),
    )


def upgrade() -> None:
    for table, keys in KEYS.items():
        if op.get_bind().dialect.name == "sqlite":
            # The table is rebuilt with the reflected key columns plus this one.
            with op.batch_alter_table(table, recreate="always") as batch:
                batch.add_column(_shard(primary_key=True))
                batch.create_primary_key(f"pk_{table}", [*keys, "shard"])
        else:
            op.add_column(table, _shard(primary_key=False))
            op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey")
            op.create_primary_key(f"{table}_pkey", table, [*keys, "shard"])


def downgrade() -> None:
    """Each key's shards summed into one row again, then the old primary key."""
    bind = op.get_bind()
    for table, keys in KEYS.items():
        columns = [c["name"] for c in sa.inspect(bind).get_columns(table)]
        sums = [c for c in columns if c not in (*keys, "shard")]
        key_list = ", ".join(keys)
        summed = ", ".join(f"SUM({c}) AS {c}" for c in sums)
        op.execute(
            f"CREATE TEMPORARY TABLE folded_{table} AS SELECT {key_list}, {summed}"
            f" FROM {table} GROUP BY {key_list}"
        )
        op.execute(f"DELETE FROM {table}")
        if bind.dialect.name == "sqlite":
            with op.batch_alter_table(table, recreate="always") as batch:
                batch.drop_column("shard")
                batch.create_primary_key(f"pk_{table}", keys)
        else:
            op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey")
            op.drop_column(table, "shard")
            op.create_primary_key(f"{table}_pkey", table, keys)
        op.execute(
            f"INSERT INTO {table} ({key_list}, {', '.join(sums)}) SELECT * FROM folded_{table}"
        )
        op.execute(f"DROP TABLE folded_{table}")
