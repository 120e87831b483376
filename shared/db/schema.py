"""Table definitions shared by every dialect; queries are written against these objects."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    Table,
    Text,
    text,
)

from shared.usage import LATENCY_BUCKETS

metadata = MetaData()

sessions = Table(
    "sessions",
    metadata,
    Column("id", Text, primary_key=True),
    Column("source", Text, nullable=False),
    Column("user_id", Text),
    Column("session_key", Text),
    Column("chat_id", Text),
    Column("chat_type", Text),
    Column("thread_id", Text),
    Column("title", Text),
    Column("title_source", Text),
    Column("model", Text),
    Column("model_config", Text),
    Column("system_prompt", Text),
    Column("parent_session_id", Text, ForeignKey("sessions.id", ondelete="SET NULL")),
    Column("started_at", Float, nullable=False),
    Column("ended_at", Float),
    Column("end_reason", Text),
    Column("last_active_at", Float, nullable=False),
    Column("message_count", BigInteger, nullable=False, server_default=text("0")),
    Column("input_tokens", BigInteger, nullable=False, server_default=text("0")),
    Column("output_tokens", BigInteger, nullable=False, server_default=text("0")),
    Index("ix_sessions_last_active", "last_active_at", "id"),  # the listing order (0009)
    # PostgreSQL: stats' per-source count and sum read from this index alone (0021).
    Index(
        "ix_sessions_source_last_active",
        "source",
        "last_active_at",
        "id",
        postgresql_include=["message_count"],
    ),
    Index("ix_sessions_parent", "parent_session_id"),
    Index("ix_sessions_session_key", "session_key", "started_at"),
    Index(
        "ix_sessions_ended",
        "ended_at",
        sqlite_where=text("ended_at IS NOT NULL"),
        postgresql_where=text("ended_at IS NOT NULL"),
    ),
    Index(
        "ux_sessions_title",
        "title",
        unique=True,
        sqlite_where=text("title IS NOT NULL"),
        postgresql_where=text("title IS NOT NULL"),
    ),
)

messages = Table(
    "messages",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "session_id",
        Text,
        ForeignKey("sessions.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("role", Text, nullable=False),
    Column("content", Text),
    Column("tool_calls", Text),
    Column("tool_call_id", Text),
    Column("tool_name", Text),
    Column("token_count", BigInteger),
    Column("timestamp", Float, nullable=False),
    Column("platform_message_id", Text),
    Index("ix_messages_session", "session_id", "id"),
    sqlite_autoincrement=True,
)

state_meta = Table(
    "state_meta",
    metadata,
    Column("key", Text, primary_key=True),
    Column("value", Text),
)

# Per-source counters kept by SQLite's triggers, so `stats` never scans there. PostgreSQL
# leaves the table empty and sums `sessions` instead (why: shared.db.postgresql).
source_stats = Table(
    "source_stats",
    metadata,
    Column("source", Text, primary_key=True),
    Column("sessions", BigInteger, nullable=False, server_default=text("0")),
    Column("messages", BigInteger, nullable=False, server_default=text("0")),
    # Derived from sessions (SQLite's triggers keep it; PostgreSQL sums sessions instead):
    # `hermes db copy` leaves it to the target rather than copying another store's figures.
    info={"derived": True},
)

# --- the turn pipeline (revision 0002) ---

# One row per session key: the current session, the arrival counter and the drain lease.
routes = Table(
    "routes",
    metadata,
    Column("session_key", Text, primary_key=True),
    Column("session_id", Text, ForeignKey("sessions.id", ondelete="SET NULL")),
    Column("platform", Text, nullable=False),
    Column("chat_id", Text, nullable=False),
    Column("chat_type", Text, nullable=False),
    Column("thread_id", Text),
    Column("user_id", Text),
    Column("next_seq", Integer, nullable=False, server_default=text("0")),
    Column("lease_holder", Text),
    Column("lease_expires_at", Float),
    Column("fence", Integer, nullable=False, server_default=text("0")),
    Column("stop_requested_at", Float),
    Column("pending_title", Text),
    # A wake-up was sent for the key (when, and by which arrival) and no drain has taken or
    # let go of the lease since (revision 0007).
    Column("wake_sent_at", Float),
    Column("wake_seq", Integer),
    # The handoff that made this room key shared by everyone in the room, while the route
    # holds a session (revision 0015; see shared/pipeline/route_sessions.py `shared_room`).
    Column("shared_by_handoff", Integer),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Index("ix_routes_session", "session_id"),
)

# Every turn a platform handed us, recorded before the platform is acked.
inbox = Table(
    "inbox",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("platform", Text, nullable=False),
    Column("event_id", Text, nullable=False),
    Column("session_key", Text, ForeignKey("routes.session_key"), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("kind", Text, nullable=False, server_default=text("'message'")),
    Column("chat_id", Text, nullable=False),
    Column("chat_type", Text, nullable=False),
    Column("thread_id", Text),
    Column("user_id", Text),
    Column("user_name", Text),
    Column("message_id", Text),
    Column("reply_to", Text),
    Column("text", Text, nullable=False),
    Column("attachments", Text),
    Column("status", Text, nullable=False, server_default=text("'waiting'")),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("not_before", Float),
    Column("session_id", Text),
    Column("error", Text),
    Column("received_at", Float, nullable=False),
    Column("started_at", Float),
    Column("finished_at", Float),
    # A reset's memory-flush turn: the session it was queued for (revision 0009).
    Column("flush_session_id", Text),
    Index("ux_inbox_event", "platform", "event_id", unique=True),
    Index("ux_inbox_key_seq", "session_key", "seq", unique=True),
    Index("ix_inbox_status", "status", "received_at"),
    Index(
        "ix_inbox_open",
        "session_key",
        "seq",
        sqlite_where=text("status IN ('waiting', 'running')"),
        postgresql_where=text("status IN ('waiting', 'running')"),
    ),
    sqlite_autoincrement=True,
)

# Replies waiting to be sent, written in the same fenced transaction as the turn's outcome.
outbox = Table(
    "outbox",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("lane", Text, nullable=False),
    Column("turn_id", Integer, ForeignKey("inbox.id", ondelete="SET NULL")),
    Column("session_id", Text),
    Column("platform", Text, nullable=False),
    Column("chat_id", Text, nullable=False),
    Column("thread_id", Text),
    Column("reply_to", Text),
    Column("text", Text, nullable=False),
    Column("status", Text, nullable=False, server_default=text("'pending'")),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("not_before", Float),
    Column("platform_message_id", Text),
    Column("error", Text),
    Column("created_at", Float, nullable=False),
    Column("sent_at", Float),
    Index("ix_outbox_lane", "lane", "status", "id"),
    Index("ix_outbox_status", "status", "created_at"),
    sqlite_autoincrement=True,
)

# Delivery lanes (one per chat) and other named leases share one table.
leases = Table(
    "leases",
    metadata,
    Column("name", Text, primary_key=True),
    Column("holder", Text),
    Column("expires_at", Float),
    Column("fence", Integer, nullable=False, server_default=text("0")),
    Column("cooldown_until", Float),
)

# --- agent memory (revision 0005) ---

# Durable notes about one user identity ("<platform>:<user id>"; the terminal's is "cli:local"),
# saved by the agent's `memory` tool and shown to the model in later sessions.
memories = Table(
    "memories",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("owner", Text, nullable=False),
    Column("content", Text, nullable=False),
    Column("session_id", Text, ForeignKey("sessions.id", ondelete="SET NULL")),
    Column("created_at", Float, nullable=False),
    Index("ix_memories_owner", "owner", "id"),
    sqlite_autoincrement=True,
)

# --- cron agent jobs (revision 0006) ---

cron_jobs = Table(
    "cron_jobs",
    metadata,
    Column("id", Text, primary_key=True),
    Column("name", Text, nullable=False),
    Column("schedule", Text, nullable=False),
    Column("timezone", Text, nullable=False),
    Column("prompt", Text, nullable=False),
    Column("deliver_platform", Text),
    Column("deliver_chat", Text),
    Column("paused", Integer, nullable=False, server_default=text("0")),
    Column("created_at", Float, nullable=False),
    Column("last_slot", Float),
    Index("ux_cron_jobs_name", "name", unique=True),
)

# One row per job and slot: the unique key that keeps a slot from running twice.
cron_runs = Table(
    "cron_runs",
    metadata,
    Column("job_id", Text, ForeignKey("cron_jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("slot", Float, primary_key=True),
    Column("turn_id", Integer),
    Column("manual", Integer, nullable=False, server_default=text("0")),
    Column("created_at", Float, nullable=False),
)

# One row per `/handoff <platform>` (revision 0014): pending → running → completed | failed.
handoffs = Table(
    "handoffs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("session_id", Text, nullable=False),
    Column("source_key", Text, nullable=False),
    Column("platform", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("error", Text),
    Column("chat_id", Text),
    Column("thread_id", Text),
    Column("target_key", Text),
    Column("requested_at", Float, nullable=False),
    Column("deadline", Float, nullable=False),
    Column("claimed_at", Float),
    Column("claimed_by", Text),  # host:pid of the claiming process (revision 0015)
    Column("finished_at", Float),
    Index("ix_handoffs_session", "session_id", "status"),
    Index("ix_handoffs_status", "status"),
)

# --- platform cursors (revision 0016) ---

# Where a polling receiver resumes: one row per (platform, account), e.g. Matrix's `next_batch`.
platform_cursors = Table(
    "platform_cursors",
    metadata,
    Column("platform", Text, primary_key=True),
    Column("account", Text, primary_key=True),
    Column("cursor", Text, nullable=False),
    Column("updated_at", Float, nullable=False),
)

# --- media blobs (revision 0017) ---

# Attachments and derived media, content-addressed: every host of a fleet reads them here, never
# from a path on one host. Owned by shared.store.media.
media_blobs = Table(
    "media_blobs",
    metadata,
    Column("sha256", Text, primary_key=True),  # hex digest of the bytes
    Column("data", LargeBinary, nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("media_type", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    # Revision 0018: the object store holding the bytes (`media.url`), `data` then empty;
    # NULL when the bytes are in `data`.
    Column("location", Text),
    Index("ix_media_blobs_created", "created_at"),
    info={"copy_batch": 16},  # `hermes db copy` moves few of these at a time: they are large
)

# Which session holds which blob; a blob goes when its last reference goes. Plain text session
# ids (no foreign key): a turn's attachment is stored before its session row may exist.
media_refs = Table(
    "media_refs",
    metadata,
    Column(
        "sha256",
        Text,
        ForeignKey("media_blobs.sha256", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("session_id", Text, primary_key=True),
    Column("name", Text),
    Column("created_at", Float, nullable=False),
    Index("ix_media_refs_session", "session_id"),
)

# --- the usage ledger (revision 0008) ---

Tokens = BigInteger
# An id column that is SQLite's rowid there and a BIGINT elsewhere.
BigId = BigInteger().with_variant(Integer, "sqlite")
LATENCY_COLUMNS = tuple(f"lat_{n:02d}" for n in range(LATENCY_BUCKETS))
HOUR_COLUMNS = tuple(f"h{n:02d}" for n in range(24))

# One row per model call. Plain text session ids (no foreign key): the ledger outlives the
# sessions it paid for, so pruning a session leaves its spending in place.
usage_ledger = Table(
    "usage_ledger",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("at", Float, nullable=False),
    Column("session_id", Text),
    Column("turn_id", BigInteger),
    Column("platform", Text, nullable=False),
    Column("model", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("input_tokens", Tokens, nullable=False),
    Column("output_tokens", Tokens, nullable=False),
    Column("cached_tokens", Tokens),
    Column("reasoning_tokens", Tokens),
    Column("estimated", Integer, nullable=False, server_default=text("0")),
    Column("latency_ms", Float, nullable=False),
    Column("cost", Float),  # dollars; NULL: the model has no price
    Column("cron_job", Text),
    Column("tools", Text),  # JSON {"tool": [calls, failures]} for a tool round
    Index("ix_usage_ledger_at", "at"),
)


def _sums() -> list[Column[int] | Column[float]]:
    return [
        Column("calls", BigInteger, nullable=False, server_default=text("0")),
        Column("input_tokens", Tokens, nullable=False, server_default=text("0")),
        Column("output_tokens", Tokens, nullable=False, server_default=text("0")),
        Column("cached_tokens", Tokens, nullable=False, server_default=text("0")),
        Column("reasoning_tokens", Tokens, nullable=False, server_default=text("0")),
        Column("estimated_calls", BigInteger, nullable=False, server_default=text("0")),
        Column("unpriced_calls", BigInteger, nullable=False, server_default=text("0")),
        Column("cost", Float, nullable=False, server_default=text("0")),
    ]


# Rollups of the ledger, kept in the same writes, so a report reads a few thousand rows a year
# whatever the traffic. Days are UTC day numbers (shared.usage.day_of).
usage_daily = Table(
    "usage_daily",
    metadata,
    Column("day", Integer, primary_key=True),
    Column("platform", Text, primary_key=True),
    Column("model", Text, primary_key=True),
    Column("kind", Text, primary_key=True),
    # Which of shared.store.usage.SHARDS rows of this key a call adds to (migration 0019).
    Column("shard", SmallInteger, primary_key=True, server_default=text("0")),
    *_sums(),
    Column("latency_ms", Float, nullable=False, server_default=text("0")),
    # The latency histogram (shared.usage.latency_bucket) and the calls per UTC hour of day.
    *(
        Column(name, BigInteger, nullable=False, server_default=text("0"))
        for name in LATENCY_COLUMNS
    ),
    *(Column(name, BigInteger, nullable=False, server_default=text("0")) for name in HOUR_COLUMNS),
)

usage_sessions = Table(
    "usage_sessions",
    metadata,
    Column("day", Integer, primary_key=True),
    Column("session_id", Text, primary_key=True),
    Column("platform", Text, primary_key=True),
    Column("model", Text, primary_key=True),
    *_sums(),
    Column("cron_job", Text),
)

usage_tools = Table(
    "usage_tools",
    metadata,
    Column("day", Integer, primary_key=True),
    Column("platform", Text, primary_key=True),
    Column("model", Text, primary_key=True),
    Column("tool", Text, primary_key=True),
    Column("shard", SmallInteger, primary_key=True, server_default=text("0")),
    Column("calls", BigInteger, nullable=False, server_default=text("0")),
    Column("failures", BigInteger, nullable=False, server_default=text("0")),
)
