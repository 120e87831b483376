"""The usage ledger (one row per model call) and its daily, per-session and per-tool rollups.

Session ids are plain text, with no foreign key: pruning a session keeps what it spent.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

LATENCY_BUCKETS = 32  # shared.usage.LATENCY_BUCKETS when this revision was written


def _count(name: str) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(name, sa.BigInteger, nullable=False, server_default=sa.text("0"))


def _sums() -> list[sa.Column]:  # type: ignore[type-arg]
    return [
        *(
            _count(name)
            for name in (
                "calls",
                "input_tokens",
                "output_tokens",
                "cached_tokens",
                "reasoning_tokens",
                "estimated_calls",
                "unpriced_calls",
            )
        ),
        sa.Column("cost", sa.Float, nullable=False, server_default=sa.text("0")),
    ]


def upgrade() -> None:
    op.create_table(
        "usage_ledger",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer, "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("session_id", sa.Text),
        sa.Column("turn_id", sa.BigInteger),
        sa.Column("platform", sa.Text, nullable=False),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("input_tokens", sa.BigInteger, nullable=False),
        sa.Column("output_tokens", sa.BigInteger, nullable=False),
        sa.Column("cached_tokens", sa.BigInteger),
        sa.Column("reasoning_tokens", sa.BigInteger),
        sa.Column("estimated", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("latency_ms", sa.Float, nullable=False),
        sa.Column("cost", sa.Float),
        sa.Column("cron_job", sa.Text),
        sa.Column("tools", sa.Text),
    )
    op.create_index("ix_usage_ledger_at", "usage_ledger", ["at"])
    op.create_table(
        "usage_daily",
        sa.Column("day", sa.Integer, primary_key=True),
        sa.Column("platform", sa.Text, primary_key=True),
        sa.Column("model", sa.Text, primary_key=True),
        sa.Column("kind", sa.Text, primary_key=True),
        *_sums(),
        sa.Column("latency_ms", sa.Float, nullable=False, server_default=sa.text("0")),
        *(_count(f"lat_{n:02d}") for n in range(LATENCY_BUCKETS)),
        *(_count(f"h{n:02d}") for n in range(24)),
    )
    op.create_table(
        "usage_sessions",
        sa.Column("day", sa.Integer, primary_key=True),
        sa.Column("session_id", sa.Text, primary_key=True),
        sa.Column("platform", sa.Text, primary_key=True),
        sa.Column("model", sa.Text, primary_key=True),
        *_sums(),
        sa.Column("cron_job", sa.Text),
    )
    op.create_table(
        "usage_tools",
        sa.Column("day", sa.Integer, primary_key=True),
        sa.Column("platform", sa.Text, primary_key=True),
        sa.Column("model", sa.Text, primary_key=True),
        sa.Column("tool", sa.Text, primary_key=True),
        _count("calls"),
        _count("failures"),
    )


def downgrade() -> None:
    raise NotImplementedError("hermes-fleet schemas only move forward; restore a backup instead")
