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

from shared.maintenance import prune_due
from shared.store import leases, meta, sqlite
from shared.store import sessions as session_rows
from workers.runtime import Runtime

log = logging.getLogger(__name__)

LEASE = "maintenance:prune"
LEASE_TTL = 120.0
LAST_RUN = "prune.last_run"
BATCH_SESSIONS = 50
# Deleting a message costs its FTS5 and trigram entries too (and the merges they start): at a
# million messages a batch of 300 held the write lock up to ~100 ms and wrote ~5,000 WAL pages,
# 100 up to ~45 ms. bench/maintenance.py measures the stall a turn write sees.
BATCH_MESSAGES = 200


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


def _pause(rt: Runtime) -> None:
    time.sleep(rt.settings.maintenance.vacuum_pause_ms / 1000)


def _run(rt: Runtime, lease: leases.Lease) -> PruneReport:
    cfg = rt.settings.sessions
    cutoff = rt.clock() - cfg.retention_days * 86400
    sessions = messages = 0
    while True:
        with rt.store.write() as conn:
            leases.check_named(conn, lease, rt.clock(), LEASE_TTL)
            gone, taken = session_rows.prune_batch(
                conn, ended_before=cutoff, limit=BATCH_SESSIONS, max_messages=BATCH_MESSAGES
            )
        sessions += gone
        messages += taken
        if gone == 0 and taken == 0:
            break
        _checkpoint(rt)
        _pause(rt)
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
    step = rt.settings.maintenance.vacuum_step_pages
    with rt.store.read() as conn:
        raw = conn.connection.dbapi_connection
        assert raw is not None
        if sqlite.auto_vacuum_mode(raw) != sqlite.INCREMENTAL:  # type: ignore[arg-type]
            log.warning("state.db has no incremental auto-vacuum; freed pages stay for reuse")
            return 0, 0, 0
        left = sqlite.free_pages(raw)  # type: ignore[arg-type]
    before = _checkpointed_size(rt)
    freed = 0
    while left > 0:
        with rt.store.write() as conn:
            if lease is not None:
                leases.check_named(conn, lease, rt.clock(), LEASE_TTL)
            remaining = sqlite.reclaim_step(conn, step)
        freed += left - remaining
        left = remaining
        _checkpoint(rt)
        _pause(rt)
    return before, _checkpointed_size(rt), freed


def _checkpoint(rt: Runtime) -> None:
    """Copy the WAL into state.db from here, outside the write lock (PASSIVE: it waits for
    nobody), so the pages a batch wrote never make a turn's commit run the checkpoint."""
    if rt.store.path is None:
        return
    raw = rt.store.engine.raw_connection()
    try:
        sqlite.wal_checkpoint(raw.driver_connection, "PASSIVE")  # type: ignore[arg-type]
    finally:
        raw.close()


def _checkpointed_size(rt: Runtime) -> int:
    """state.db's size once the WAL is copied in."""
    _checkpoint(rt)
    assert rt.store.path is not None
    return rt.store.path.stat().st_size
