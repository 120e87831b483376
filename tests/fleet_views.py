"""What the fleet tests read from a PostgreSQL store while the fleet runs and after it: leases,
fences, open transactions per host, transcripts and turn statuses."""

from __future__ import annotations

import time
from collections import defaultdict

from sqlalchemy import select, text

from shared.db import Store
from shared.db.schema import inbox, messages, routes


def held_running(store: Store, pids: set[int]) -> dict[str, int]:
    """Keys whose lease a process in `pids` holds, live, with a turn running: key → fence."""
    now = time.time()
    with store.read() as conn:
        rows = conn.execute(
            select(routes.c.session_key, routes.c.lease_holder, routes.c.fence).where(
                routes.c.lease_holder.is_not(None), routes.c.lease_expires_at > now
            )
        ).all()
        running = set(
            conn.execute(select(inbox.c.session_key).where(inbox.c.status == "running")).scalars()
        )
    return {
        str(key): int(fence)
        for key, holder, fence in rows
        if int(str(holder).split(":")[1]) in pids and key in running
    }


def fences(store: Store, keys: list[str]) -> dict[str, int]:
    with store.read() as conn:
        rows = conn.execute(
            select(routes.c.session_key, routes.c.fence).where(routes.c.session_key.in_(keys))
        ).all()
    return {str(k): int(f) for k, f in rows}


def in_transaction(store: Store, ip: str) -> int:
    """How many connections from `ip` are inside a transaction or a statement on the server."""
    with store.read() as conn:
        busy = conn.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE client_addr = CAST(:ip AS inet) "
                "AND state <> 'idle'"
            ),
            {"ip": ip},
        ).scalar_one()
    return int(busy)


def open_turns(store: Store) -> int:
    with store.read() as conn:
        return int(
            conn.execute(
                text("SELECT count(*) FROM inbox WHERE status IN ('waiting', 'running')")
            ).scalar_one()
        )


def transcripts(store: Store) -> dict[str, list[tuple[str, str]]]:
    """Session key → its current session's messages (role, content), in order."""
    with store.read() as conn:
        key_by_session = {
            str(s): str(k)
            for s, k in conn.execute(select(routes.c.session_id, routes.c.session_key)).all()
        }
        out: dict[str, list[tuple[str, str]]] = defaultdict(list)
        rows = conn.execute(
            select(messages.c.session_id, messages.c.role, messages.c.content).order_by(
                messages.c.id
            )
        )
        for session_id, role, content in rows:
            out[key_by_session.get(str(session_id), f"?{session_id}")].append(
                (str(role), content or "")
            )
    return out


def statuses(store: Store) -> dict[str, int]:
    with store.read() as conn:
        rows = conn.execute(select(inbox.c.status, text("count(*)")).group_by(inbox.c.status))
        return {str(s): int(c) for s, c in rows}


def unfinished(store: Store) -> list[tuple[str, int, str, int, str | None]]:
    """Turns not done: key, seq, status, attempts, last error (what a failure should show)."""
    with store.read() as conn:
        rows = conn.execute(
            select(
                inbox.c.session_key, inbox.c.seq, inbox.c.status, inbox.c.attempts, inbox.c.error
            ).where(inbox.c.status != "done")
        ).all()
    return [(str(k), int(q), str(s), int(a), e) for k, q, s, a, e in rows]
