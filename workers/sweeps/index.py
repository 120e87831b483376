"""The index sweeps: merge the FTS5 segments that turn-by-turn appends pile up (SQLite), and
move the GIN indexes' pending lists into the indexes (PostgreSQL).

Every append leaves a small segment; the merging that appends do themselves (automerge) keeps
the index at tens of segments, and every query reads each one. This sweep folds them together
in bounded steps (the big segment is rewritten only when the small ones reach its level),
under the maintenance lease the prune takes, so the two never run at once. It also ends any
hold on the appends' merging that a killed maintenance run left behind.

On PostgreSQL a new row's search keys wait in each GIN index's pending list until the list
outgrows 4 MB, and the writer that finds it so moves it into the index and waits for that
(100-600 ms). The pending sweep, run every 2 seconds, moves it first: no writer pays, and
searches read a short list. It needs no lease: PostgreSQL lets one cleanup of an index run at
a time, and a second finds nothing to do.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from shared.pipeline import leases
from shared.store import reclaim as reclaim_store
from workers.runtime import Runtime
from workers.sweeps.prune import LEASE, LEASE_TTL, lease_guard

log = logging.getLogger(__name__)

# Appends leave up to 64 one-page segments on the lowest level (their own merging runs once
# per 64 pages written) and up to 3 on each level above: 15-70 in all at a million messages.
# Folded, an index holds one per level at most, a handful.
MAX_SEGMENTS = 16


@dataclass(frozen=True, slots=True)
class IndexReport:
    reason: str  # merged | not-needed | busy
    segments_before: int = 0
    segments_after: int = 0
    steps: int = 0


def sweep(rt: Runtime) -> IndexReport:
    """Merge each index holding more than MAX_SEGMENTS segments (SQLite only)."""
    counts = reclaim_store.segment_counts(rt.store)
    if (
        not reclaim_store.is_sqlite_file(rt.store)
        or max(counts.values(), default=0) <= MAX_SEGMENTS
    ):
        return IndexReport("not-needed", sum(counts.values()), sum(counts.values()))
    with rt.store.write() as conn:
        lease = leases.acquire_named(conn, LEASE, rt.holder(), rt.clock(), LEASE_TTL)
    if lease is None:
        return IndexReport("busy")
    try:
        merged = reclaim_store.merge_indexes(
            rt.store,
            pacing=reclaim_store.pacing_for(rt.settings.maintenance),
            sleep=time.sleep,
            full=False,
            above=MAX_SEGMENTS,
            guard=lease_guard(rt, lease),
        )
    finally:
        with rt.store.write() as conn:
            leases.release_named(conn, lease)
    log.info("index segments %d -> %d", merged.segments_before, merged.segments_after)
    return IndexReport("merged", merged.segments_before, merged.segments_after, merged.steps)


@dataclass(frozen=True, slots=True)
class PendingReport:
    reason: str  # flushed | not-needed
    pages: int = 0  # pending-list pages moved into the indexes


def pending_sweep(rt: Runtime) -> PendingReport:
    """Move the search indexes' pending lists into the indexes (PostgreSQL only)."""
    moved = reclaim_store.flush_pending_lists(rt.store)
    if not moved:
        return PendingReport("not-needed")
    pages = sum(moved.values())
    if pages:
        log.debug("search index pending lists: %d pages moved in", pages)  # every 2 s under load
    return PendingReport("flushed", pages)
