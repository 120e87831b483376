"""Retention prune: ended sessions older than `sessions.retention_days`, then space back.

At most once per `sessions.min_interval_hours` for the whole fleet (the last run is kept in
state_meta, read and written under a cross-process lease), in short batches so turn writes
keep flowing, and the freed pages go back to the file system a few hundred at a time
(incremental auto-vacuum) instead of in one VACUUM that holds the write lock for seconds.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from sqlalchemy import Connection

from shared.maintenance import PRUNE_LAST_RUN, prune_due
from shared.store import leases, meta
from shared.store import reclaim as reclaim_store
from workers.runtime import Runtime

log = logging.getLogger(__name__)

LEASE = "maintenance:prune"
LEASE_TTL = 120.0
LAST_RUN = PRUNE_LAST_RUN


@dataclass(frozen=True, slots=True)
class PruneReport:
    ran: bool
    reason: str  # disabled | not-due | busy | done
    sessions: int = 0
    messages: int = 0
    pages_freed: int = 0
    bytes_before: int = 0
    bytes_after: int = 0


def sweep(rt: Runtime, *, force: bool = False) -> PruneReport:
    cfg = rt.settings.sessions
    if not cfg.auto_prune and not force:
        return PruneReport(False, "disabled")
    with rt.store.write() as conn:
        now = rt.clock()
        last = meta.get_meta(conn, LAST_RUN)
        if not force and not prune_due(float(last) if last else None, now, cfg.min_interval_hours):
            return PruneReport(False, "not-due")
        lease = leases.acquire_named(conn, LEASE, rt.holder(), now, LEASE_TTL)
    if lease is None:
        return PruneReport(False, "busy")
    try:
        return _run(rt, lease)
    finally:
        with rt.store.write() as conn:
            leases.release_named(conn, lease)


def _lease_guard(rt: Runtime, lease: leases.Lease | None) -> reclaim_store.Guard | None:
    """Every write transaction first checks that the lease is still ours."""
    if lease is None:
        return None

    def check(conn: Connection) -> None:
        leases.check_named(conn, lease, rt.clock(), LEASE_TTL)

    return check


def _run(rt: Runtime, lease: leases.Lease) -> PruneReport:
    cfg = rt.settings.sessions
    cutoff = rt.clock() - cfg.retention_days * 86400
    sessions, messages = reclaim_store.prune_in_batches(
        rt.store,
        ended_before=cutoff,
        pacing=reclaim_store.pacing_for(rt.settings.maintenance),
        sleep=time.sleep,
        guard=_lease_guard(rt, lease),
    )
    before = after = freed = 0
    if sessions and cfg.vacuum_after_prune:
        before, after, freed = reclaim(rt, lease)
    with rt.store.write() as conn:
        leases.check_named(conn, lease, rt.clock(), LEASE_TTL)
        meta.set_meta(conn, LAST_RUN, repr(rt.clock()))
    log.info("pruned %d sessions (%d messages), freed %d pages", sessions, messages, freed)
    return PruneReport(True, "done", sessions, messages, freed, before, after)


def reclaim(rt: Runtime, lease: leases.Lease | None = None) -> tuple[int, int, int]:
    """Give free pages back in small write transactions: (file bytes before, after, pages)."""
    if rt.store.path is None:
        return 0, 0, 0
    if not reclaim_store.incremental(rt.store):
        log.warning("state.db has no incremental auto-vacuum; freed pages stay for reuse")
        return 0, 0, 0
    done = reclaim_store.reclaim_space(
        rt.store,
        pacing=reclaim_store.pacing_for(rt.settings.maintenance),
        sleep=time.sleep,
        guard=_lease_guard(rt, lease),
    )
    return done.bytes_before, done.bytes_after, done.pages_freed
