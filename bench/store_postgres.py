"""bench/store.py on PostgreSQL: the corpus built in state.db is copied into a fresh schema of
the given database, then the same appends, listing, stats and export are timed there.

The copy keeps ids and every column; the counters a store keeps (sessions.message_count,
source_stats) are set from the copied rows, as a store keeping them would hold them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sqlalchemy import bindparam, func, insert, select, text

from bench.common import fresh_schema
from shared.db.engine import Store, connect, open_store
from shared.db.schema import messages, sessions, source_stats

BATCH = 5_000


def copy_corpus(sqlite_path: Path, database_url: str, report: Any) -> tuple[Store, float]:
    """A Store on a fresh schema of `database_url` holding state.db's sessions and messages."""
    started = time.perf_counter()
    url = fresh_schema(database_url, "store")
    assert url is not None
    target = open_store(url)
    source = connect(f"sqlite:///{sqlite_path}")
    try:
        with source.read() as src:
            for table in (sessions, messages):
                rows = src.execute(select(table).order_by(*table.primary_key.columns))
                batch: list[dict[str, Any]] = []
                copied = 0
                for row in rows:
                    batch.append(dict(row._mapping))
                    if table is sessions:  # its parent may come after it: set below
                        batch[-1]["parent_session_id"] = None
                    if len(batch) == BATCH:
                        copied += _insert(target, table, batch)
                        report(f"  copied {copied:,} {table.name}")
                with_rest = copied + _insert(target, table, batch)
                report(f"  copied {with_rest:,} {table.name}")
            _link_parents(src, target)
    finally:
        source.close()
    with target.write() as conn:
        conn.execute(
            text(
                "SELECT setval(pg_get_serial_sequence('messages', 'id'), "
                "(SELECT COALESCE(MAX(id), 1) FROM messages))"
            )
        )
        _recount(conn)
        conn.execute(text("ANALYZE"))
    return target, time.perf_counter() - started


def _link_parents(src: Any, target: Store) -> None:
    """Each session's parent, set once every session is there: a session may name a parent
    whose id sorts after its own (the 1M-message corpus has one), which the foreign key refuses
    while that parent is not copied yet. `hermes db copy` does the same (shared/db/copy.py)."""
    linked = src.execute(
        select(sessions.c.id, sessions.c.parent_session_id).where(
            sessions.c.parent_session_id.is_not(None)
        )
    ).all()
    if not linked:
        return
    with target.write() as conn:
        conn.execute(
            sessions.update()
            .where(sessions.c.id == bindparam("_id"))
            .values(parent_session_id=bindparam("_parent")),
            [{"_id": row[0], "_parent": row[1]} for row in linked],
        )


def _insert(store: Store, table: Any, batch: list[dict[str, Any]]) -> int:
    if not batch:
        return 0
    with store.write() as conn:
        conn.execute(insert(table), batch)
    done = len(batch)
    batch.clear()
    return done


def _recount(conn: Any) -> None:
    counted = (
        select(messages.c.session_id, func.count().label("n"))
        .group_by(messages.c.session_id)
        .subquery()
    )
    conn.execute(
        sessions.update()
        .where(sessions.c.id == counted.c.session_id)
        .values(message_count=counted.c.n)
    )
    conn.execute(source_stats.delete())
    by_source = conn.execute(
        select(
            sessions.c.source,
            func.count().label("sessions"),
            func.coalesce(func.sum(sessions.c.message_count), 0).label("messages"),
        ).group_by(sessions.c.source)
    ).all()
    if by_source:
        conn.execute(insert(source_stats), [dict(row._mapping) for row in by_source])
