"""Retention prune: ended sessions older than `sessions.retention_days`, merged indexes, space back.

At most once per `sessions.min_interval_hours` for the whole fleet (the last run is kept in
state_meta, read and written under a cross-process lease), in short batches so turn writes
keep flowing. Then the search indexes are merged (the deleted rows leave them) and the freed
pages go back to the file system (incremental auto-vacuum), each in bounded steps instead of
one 'optimize' and one VACUUM that hold the write lock for seconds.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from shared import legacy_media
from shared.db import Connection, meta
from shared.maintenance import PRUNE_LAST_RUN, prune_due
from shared.pipeline import leases
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
    merged: reclaim_store.Merged | None = None
    reclaimed: reclaim_store.Reclaimed | None = None

    @property
    def pages_freed(self) -> int:
        return self.reclaimed.pages_freed if self.reclaimed else 0

    @property
    def bytes_before(self) -> int:
        return self.reclaimed.bytes_before if self.reclaimed else 0

    @property
    def bytes_after(self) -> int:
        return self.reclaimed.bytes_after if self.reclaimed else 0


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


def lease_guard(rt: Runtime, lease: leases.Lease | None) -> reclaim_store.Guard | None:
    """Every write transaction first checks that the lease is still ours."""
    if lease is None:
        return None

    def check(conn: Connection) -> None:
        leases.check_named(conn, lease, rt.clock(), LEASE_TTL)

    return check


def _run(rt: Runtime, lease: leases.Lease) -> PruneReport:
    cfg = rt.settings.sessions
    cutoff = rt.clock() - cfg.retention_days * 86400
    pacing = reclaim_store.pacing_for(rt.settings.maintenance)
    guard = lease_guard(rt, lease)
    merged = reclaimed = None
    with reclaim_store.merging_held(rt.store, guard):
        gone: list[str] = []
        sessions, messages = reclaim_store.prune_in_batches(
            rt.store,
            ended_before=cutoff,
            pacing=pacing,
            sleep=time.sleep,
            guard=guard,
            fold=True,
            deleted=gone,
            objects=rt.media_objects,
        )
        if sessions or messages:
            legacy_media.remove(rt.settings.media_dir, gone)  # this host's files of older versions
            merged = reclaim_store.merge_indexes(
                rt.store, pacing=pacing, sleep=time.sleep, full=True, guard=guard, hold=False
            )
    if merged is not None and cfg.vacuum_after_prune:
        reclaimed = reclaim(rt, lease)
    if merged is not None:  # fold what appends left meanwhile: searches see a handful
        reclaim_store.merge_indexes(
            rt.store, pacing=pacing, sleep=time.sleep, full=False, guard=guard
        )
    with rt.store.write() as conn:
        leases.check_named(conn, lease, rt.clock(), LEASE_TTL)
        meta.set_meta(conn, LAST_RUN, repr(rt.clock()))
    report = PruneReport(True, "done", sessions, messages, merged, reclaimed)
    log.info(
        "pruned %d sessions (%d messages); index segments %d -> %d; freed %d pages",
        sessions,
        messages,
        merged.segments_before if merged else 0,
        merged.segments_after if merged else 0,
        report.pages_freed,
    )
    return report


def reclaim(rt: Runtime, lease: leases.Lease | None = None) -> reclaim_store.Reclaimed | None:
    """Give free pages back in small write transactions (None where that cannot be done)."""
    if not reclaim_store.is_sqlite_file(rt.store):
        return None
    if not reclaim_store.incremental(rt.store):
        log.warning("state.db has no incremental auto-vacuum; freed pages stay for reuse")
        return None
    return reclaim_store.reclaim_space(
        rt.store,
        pacing=reclaim_store.pacing_for(rt.settings.maintenance),
        sleep=time.sleep,
        guard=lease_guard(rt, lease),
    )
