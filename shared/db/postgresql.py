"""Everything PostgreSQL-only: the DDL of the message counters (revision 0011), the size of our
schema, and the flush of the search indexes' pending lists."""

from __future__ import annotations

from typing import Any

# `sessions.message_count` is kept by the database on both dialects, so every path that adds
# or removes messages (appends, imports, trims, copies, a cascade from a deleted session)
# keeps it, as SQLite's row triggers do (shared.db.sqlite.COUNTER_TRIGGERS). Here they are
# statement triggers over transition tables: a bulk insert or delete of n rows costs one
# grouped UPDATE per session it touches, not n single-row updates of the same row. An
# append's transaction already holds the session row (its activity bump), so the count adds
# no lock of its own and no lock across sessions.
#
# SQLite's per-source totals (`source_stats`) are not kept here: one row per source updated by
# every append would be held locked until commit by each writer, serialising every worker of
# the fleet on it. `stats` and `count_sessions` count `sessions` instead (the source index).
COUNTER_FUNCTIONS = [
    """
CREATE FUNCTION hermes_messages_count_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE sessions AS s SET message_count = s.message_count + added.n
  FROM (SELECT session_id, count(*) AS n FROM added_rows GROUP BY session_id) AS added
  WHERE s.id = added.session_id;
  RETURN NULL;
END $$""",
    """
CREATE FUNCTION hermes_messages_count_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE sessions AS s SET message_count = s.message_count - removed.n
  FROM (SELECT session_id, count(*) AS n FROM removed_rows GROUP BY session_id) AS removed
  WHERE s.id = removed.session_id;
  RETURN NULL;
END $$""",
]

COUNTER_TRIGGERS = [
    """
CREATE TRIGGER messages_count_ai AFTER INSERT ON messages
REFERENCING NEW TABLE AS added_rows
FOR EACH STATEMENT EXECUTE FUNCTION hermes_messages_count_added()""",
    """
CREATE TRIGGER messages_count_ad AFTER DELETE ON messages
REFERENCING OLD TABLE AS removed_rows
FOR EACH STATEMENT EXECUTE FUNCTION hermes_messages_count_removed()""",
]

# Until revision 0011 nothing kept the count on PostgreSQL: every session reads 0. Run after
# the triggers exist (CREATE TRIGGER locks `messages` against writes until commit), so a
# message appended while the upgrade runs is counted once, by one or the other.
COUNTER_BACKFILL = """
UPDATE sessions AS s SET message_count = counted.n
FROM (
  SELECT s2.id, (SELECT count(*) FROM messages AS m WHERE m.session_id = s2.id) AS n
  FROM sessions AS s2
) AS counted
WHERE s.id = counted.id AND s.message_count <> counted.n
"""

# Revision 0011's downgrade (the count then goes stale again, as it was before it).
COUNTER_DROP = [
    "DROP TRIGGER IF EXISTS messages_count_ai ON messages",
    "DROP TRIGGER IF EXISTS messages_count_ad ON messages",
    "DROP FUNCTION IF EXISTS hermes_messages_count_added()",
    "DROP FUNCTION IF EXISTS hermes_messages_count_removed()",
]


def schema_bytes(conn: Any) -> tuple[str, int]:
    """(schema, bytes on disk of its tables with their indexes and TOAST): what `sessions stats`
    reports as the database size (the server's other databases and schemas are not ours)."""
    row = conn.exec_driver_sql(
        "SELECT current_schema(), coalesce(sum(pg_total_relation_size(c.oid)), 0)"
        " FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace"
        " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'm')"
    ).one()
    return str(row[0]), int(row[1])


def flush_pending_lists(conn: Any) -> dict[str, int]:
    """Move every GIN index's pending list of our schema into the index proper
    (`gin_clean_pending_list`): {index: pages moved}.

    GIN adds each new row's keys to a pending list, which every search of that index reads
    whole, and moves the list into the index only when it outgrows `gin_pending_list_limit`
    (4 MB): then the INSERT that found it full does the move, and that writer (a turn, an
    append) waits 100-600 ms for it. Flushed often, from the maintenance sweep, the list stays
    short and no writer pays."""
    rows = conn.exec_driver_sql(
        "SELECT c.relname, gin_clean_pending_list(c.oid)"
        " FROM pg_class AS c JOIN pg_am AS a ON a.oid = c.relam"
        " WHERE a.amname = 'gin' AND c.relkind = 'i'"
        " AND c.relnamespace = current_schema()::regnamespace"
        " ORDER BY c.relname"
    ).all()
    return {str(name): int(pages) for name, pages in rows}
