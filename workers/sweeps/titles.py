"""The auto-title sweep: sessions past their first exchange with no title get one (this catches
title tasks that were lost with the broker)."""

from __future__ import annotations

from shared.store import housekeeping as hk
from workers.runtime import Runtime

QUIET_SECONDS = 60.0  # leave a just-finished exchange to its own title task


def sweep(rt: Runtime, *, limit: int = 100) -> list[str]:
    with rt.store.read() as conn:
        untitled = hk.untitled_sessions(conn, quiet_since=rt.clock() - QUIET_SECONDS, limit=limit)
    for session_id in untitled:
        rt.waker.autotitle(session_id)
    return untitled
