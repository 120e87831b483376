"""Parts of PostgreSQL parity that other branches of issue 16 deliver, probed, not assumed.

A pipeline test that needs the message counters or session search on PostgreSQL skips, with the
reason, while this tree lacks them, and runs as soon as they are in: each probe asks the store
itself (on a throwaway row it rolls back), so no list here goes stale.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select

from shared.db import Store
from shared.db.schema import sessions
from shared.search.calls import backend_for
from shared.store.messages import append_message
from shared.store.sessions import create_session


def needs_counters(store: Store) -> None:
    """Skip when messages do not count themselves into their session on this store."""
    if store.dialect == "sqlite":
        return  # its triggers count them
    with store.engine.connect() as conn, conn.begin() as tx:
        create_session(conn, session_id="probe-counters", source="cli", now=1.0)
        append_message(conn, "probe-counters", "user", "x", now=1.0)
        counted = conn.execute(
            select(sessions.c.message_count).where(sessions.c.id == "probe-counters")
        ).scalar_one()
        tx.rollback()
    if counted != 1:
        pytest.skip(f"message counters on {store.dialect} are another branch of issue 16")


def needs_search(store: Store) -> None:
    """Skip when session search has no backend for this store's dialect."""
    if backend_for(store.dialect) is None:
        pytest.skip(f"session search on {store.dialect} is another branch of issue 16")
