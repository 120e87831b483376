"""Pruning without stalling turn writes: short delete batches, merged indexes, space back in steps.

Shared by beat's sweeps and `hermes sessions prune`. Each delete batch is one short write
transaction (bounded by sessions and by messages), followed, outside the write lock, by a
PASSIVE WAL checkpoint and a pause. Then the FTS5 indexes are merged (deleted rows stay in
their segments, and slow every query, until a merge rewrites them) and the freed pages go back
to the file system (incremental auto-vacuum), each a bounded step per write transaction with
the same checkpoint and pause after it, never in one VACUUM or 'optimize'. Meanwhile appends
merge nothing in the indexes (`merging_held`): the maintenance steps do all the merging, so
no turn write takes a share of a big merge. What is SQLite-only (checkpoint, merge and vacuum
steps, sizes) is in `sqlite`; on PostgreSQL, whose autovacuum does this work, merging and
reclaiming do nothing.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

from sqlalchemy import Connection

from shared.db import postgresql, sqlite
from shared.db.engine import Store
from shared.media_objects import MediaObjects, MediaStorageError
from shared.sections import MaintenanceSettings
from shared.store import media
from shared.store.sessions import prune_batch

log = logging.getLogger(__name__)

# Runs first inside every write transaction (the sweep checks its lease there); raises to stop.
Guard = Callable[[Connection], None]
Sleep = Callable[[float], None]
BATCH_SESSIONS = 50
# Deleting a message costs its FTS5 and trigram entries too, and the merges they start: with
# the appends' merging running, a batch of 300 held the write lock up to ~100 ms at a million
# messages. With it held (`merging_held`), a batch of 200 took 8-20 ms (50 at most) on a quiet
# machine, several times that on a loaded one. bench/maintenance.py measures the stall a turn
# write sees.
BATCH_MESSAGES = 100
# While appends merge nothing (`merging_held`), a prune folds an index's segments once it holds
# more than this: below crisismerge (64), where an append would merge a whole level.
FOLD_ABOVE = 32


@dataclass(frozen=True, slots=True)
class Pacing:
    """How hard a prune may lean on the write lock."""

    batch_sessions: int = BATCH_SESSIONS
    batch_messages: int = BATCH_MESSAGES
    # Free pages given back per write transaction. At a million messages (bench/maintenance.py,
    # two writers, the 2-core machine shared and loaded): 256 gave writes a p99 of 49 ms and
    # 16-25 MB/s; 512, p99 85-113 ms and 23-43 MB/s; 1024 stalled writes up to 485 ms.
    step_pages: int = 256
    # FTS5 index pages written per merge step: 100 took 25-60 ms at a million messages
    # (commit not counted), more under load; 64 (with 256 above) gave that p99 of 49 ms.
    merge_pages: int = 64
    pause_s: float = 0.02  # after each batch or step, so queued turn writes go first


def pacing_for(maintenance: MaintenanceSettings, *, batch_sessions: int = BATCH_SESSIONS) -> Pacing:
    """The pacing `maintenance.vacuum_step_pages`, `.index_merge_pages` and `.vacuum_pause_ms`
    ask for."""
    return Pacing(
        batch_sessions=batch_sessions,
        batch_messages=BATCH_MESSAGES,
        step_pages=maintenance.vacuum_step_pages,
        merge_pages=maintenance.index_merge_pages,
        pause_s=maintenance.vacuum_pause_ms / 1000,
    )


@dataclass(frozen=True, slots=True)
class Reclaimed:
    bytes_before: int  # state.db after a PASSIVE checkpoint, before the first step
    bytes_after: int
    pages_freed: int  # pages given back to the file system
    free_at_start: int = 0  # pages free when the first step began
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class Merged:
    """What merging the FTS5 indexes did (totals over the indexes)."""

    segments_before: int = 0
    segments_after: int = 0
    steps: int = 0  # write transactions
    seconds: float = 0.0


def prune_in_batches(
    store: Store,
    *,
    ended_before: float,
    source: str | None = None,
    pacing: Pacing,
    sleep: Sleep,
    guard: Guard | None = None,
    progress: Callable[[int, int], None] | None = None,
    fold: bool = False,
    deleted: list[str] | None = None,
    objects: MediaObjects | None = None,
) -> tuple[int, int]:
    """Delete every prunable session, a short batch at a time: (sessions, messages) deleted.
    Their ids are added to `deleted` when it is given (a batch's once it has committed).

    `progress` hears each batch's (sessions, messages). `fold` (inside `merging_held`): after
    a batch, an index holding more than FOLD_ABOVE segments gets a merge step.
    """
    sessions = messages = 0
    while True:
        with store.write() as conn:
            if guard is not None:
                guard(conn)
            batch: list[str] = []
            dropped: list[str] = []
            gone, taken = prune_batch(
                conn,
                ended_before=ended_before,
                source=source,
                limit=pacing.batch_sessions,
                max_messages=pacing.batch_messages,
                deleted=batch,
                dropped=dropped,
            )
        media.forget(store, objects, dropped)  # committed: the rows are gone, now their objects
        if deleted is not None:
            deleted.extend(batch)
        sessions += gone
        messages += taken
        if gone == 0 and taken == 0:
            sweep_media(store, guard=guard, limit=pacing.batch_sessions, objects=objects)
            return sessions, messages
        if progress is not None:
            progress(gone, taken)
        checkpoint(store)
        sleep(pacing.pause_s)
        if fold:
            _fold(store, pacing=pacing, sleep=sleep, guard=guard)


def sweep_media(
    store: Store,
    *,
    now: float | None = None,
    guard: Guard | None = None,
    limit: int = 500,
    objects: MediaObjects | None = None,
) -> int:
    """Remove blobs no session references that are older than the grace period (uploads whose
    turn never ran), a short batch at a time; how many went. Given the object store, their
    objects go after each commit, then objects no row names (orphans: a delete that failed,
    an upload whose row never committed) older than the grace period go too."""
    older_than = (time.time() if now is None else now) - media.UNREFERENCED_GRACE_SECONDS
    removed = 0
    while True:
        dropped: list[str] = []
        with store.write() as conn:
            if guard is not None:
                guard(conn)
            gone = media.sweep_unreferenced(
                conn, older_than=older_than, limit=limit, dropped=dropped
            )
        media.forget(store, objects, dropped)
        removed += gone
        if gone < limit:
            break
    if objects is not None:
        sweep_orphan_objects(store, objects, older_than=older_than, limit=limit)
    return removed


def sweep_orphan_objects(
    store: Store, objects: MediaObjects, *, older_than: float, limit: int = 500
) -> int:
    """Delete the objects, written before `older_than`, that no blob row names; how many. An
    unreachable store is logged and skipped: orphans wait for the next sweep."""
    removed = 0
    batch: list[str] = []

    def flush() -> int:
        with store.read() as conn:
            held = media.held_of(conn, batch)
        orphans = [sha for sha in batch if sha not in held]
        failed = objects.delete(orphans)
        batch.clear()
        return len(orphans) - len(failed)

    try:
        for item in objects.listed():
            if item.modified < older_than:
                batch.append(item.sha256)
            if len(batch) >= limit:
                removed += flush()
        if batch:
            removed += flush()
    except MediaStorageError as error:
        log.warning("%s; orphan objects are left for the next sweep", error)
    return removed


@contextmanager
def _driver(store: Store) -> Iterator[sqlite3.Connection]:
    """A pooled driver connection outside any transaction (checkpoints cannot run in one)."""
    raw = store.engine.raw_connection()
    try:
        driver = raw.driver_connection
        assert isinstance(driver, sqlite3.Connection)
        yield driver
    finally:
        raw.close()


def is_sqlite_file(store: Store) -> bool:
    return store.path is not None and store.dialect == "sqlite"


def server_size(store: Store) -> tuple[str, int] | None:
    """(schema, bytes) of the store on a PostgreSQL server; None for a SQLite file."""
    if store.dialect != "postgresql":
        return None
    with store.read() as conn:
        return postgresql.schema_bytes(conn)


def incremental(store: Store) -> bool:
    """Whether freed pages can go back in steps (files made by hermes-fleet; not older ones)."""
    if not is_sqlite_file(store):
        return False
    with _driver(store) as conn:
        return sqlite.auto_vacuum_mode(conn) == sqlite.INCREMENTAL


def checkpoint(store: Store) -> None:
    """Copy the WAL into state.db, outside the write lock (PASSIVE: it waits for nobody), so
    the pages a batch wrote never make a turn's commit run the checkpoint."""
    if not is_sqlite_file(store):
        return
    with _driver(store) as conn:
        sqlite.wal_checkpoint(conn, "PASSIVE")


def checkpointed_size(store: Store) -> int:
    """state.db's size once the WAL is copied in."""
    checkpoint(store)
    assert store.path is not None
    return sqlite.file_bytes(store.path)[0]


def truncate_wal(store: Store) -> bool:
    """Shrink the -wal file to nothing if that can be done without waiting for anyone."""
    if not is_sqlite_file(store):
        return False
    with _driver(store) as conn:
        return sqlite.try_truncate_wal(conn)


def flush_pending_lists(store: Store) -> dict[str, int]:
    """PostgreSQL: the search indexes' pending lists moved into the indexes, {index: pages}
    (`postgresql.flush_pending_lists`); empty on SQLite, whose FTS5 has none."""
    if store.dialect != "postgresql":
        return {}
    with store.write() as conn:
        return postgresql.flush_pending_lists(conn)


def segment_counts(store: Store) -> dict[str, int]:
    """Segments per FTS5 index (1 once merged); empty on PostgreSQL."""
    if store.dialect != "sqlite":
        return {}
    with store.read() as conn:
        return {table: sqlite.fts_segments(conn, table) for table in sqlite.FTS_INDEXES}


@contextmanager
def merging_held(store: Store, guard: Guard | None = None) -> Iterator[None]:
    """For the body, appends merge nothing in the FTS5 indexes: maintenance does the merging,
    in its own bounded steps (`sqlite.fts_hold_automerge`). Nothing on PostgreSQL."""
    if not is_sqlite_file(store):
        yield
        return
    with store.write() as conn:
        if guard is not None:
            guard(conn)
        for table in sqlite.FTS_INDEXES:
            sqlite.fts_hold_automerge(conn, table, True)
    try:
        yield
    finally:
        with store.write() as conn:
            for table in sqlite.FTS_INDEXES:
                sqlite.fts_hold_automerge(conn, table, False)


def _fold(store: Store, *, pacing: Pacing, sleep: Sleep, guard: Guard | None) -> None:
    """A merge step (its own write) on each index holding more than FOLD_ABOVE segments:
    while appends merge nothing, this keeps their segments (and a prune's) from piling up."""
    for table, count in segment_counts(store).items():
        if count > FOLD_ABOVE:
            _merge_step(store, table, pacing=pacing, sleep=sleep, start=False, guard=guard)


def merge_indexes(
    store: Store,
    *,
    pacing: Pacing,
    sleep: Sleep,
    full: bool,
    above: int = 1,
    guard: Guard | None = None,
    hold: bool = True,
) -> Merged:
    """Merge the FTS5 segments of each index holding more than `above`, a bounded step per
    write transaction, until a step runs out of work.

    `full` (after deletes) merges every segment into one, which drops the deleted rows: one
    rewrite of the index. Else only levels with two or more segments are merged: small
    segments fold together, and the big one is rewritten only when they reach its level.
    Appends merge nothing meanwhile (`merging_held`; `hold=False` when the caller holds it);
    the segments they add are folded in along the way. Nothing to do on PostgreSQL.
    """
    if not is_sqlite_file(store):
        return Merged()
    began = time.perf_counter()
    before = segment_counts(store)
    busy = [table for table, count in before.items() if count > above]
    steps = 0
    if busy:
        with merging_held(store, guard) if hold else nullcontext():
            steps = _merge_steps(store, busy, pacing=pacing, sleep=sleep, full=full, guard=guard)
    after = segment_counts(store) if steps else before
    return Merged(
        sum(before.values()), sum(after.values()), steps, round(time.perf_counter() - began, 3)
    )


def _merge_steps(
    store: Store,
    tables: list[str],
    *,
    pacing: Pacing,
    sleep: Sleep,
    full: bool,
    guard: Guard | None,
) -> int:
    """A step on each index in turn (so none piles up appends' segments while another is
    merged) until each has had a step that changed fewer rows than its page budget (it ran
    out of work); at most enough steps to rewrite the whole file twice, whatever appends add
    meanwhile. Returns the steps taken."""
    assert store.path is not None
    limit = 2 * (store.path.stat().st_size // sqlite.PAGE_SIZE // pacing.merge_pages + 1)
    pending = list(tables)
    started: set[str] = set()
    steps = 0
    while pending and steps < limit * len(tables):
        for table in list(pending):
            changed = _merge_step(
                store,
                table,
                pacing=pacing,
                sleep=sleep,
                start=full and table not in started,
                guard=guard,
            )
            started.add(table)
            steps += 1
            if changed < pacing.merge_pages:
                pending.remove(table)
    return steps


def _merge_step(
    store: Store, table: str, *, pacing: Pacing, sleep: Sleep, start: bool, guard: Guard | None
) -> int:
    """One merge step in its own write transaction, then the checkpoint and the pause."""
    with store.write() as conn:
        if guard is not None:
            guard(conn)
        changed = sqlite.fts_merge_step(conn, pacing.merge_pages, table, start=start)
    checkpoint(store)
    sleep(pacing.pause_s)
    return changed


def reclaim_space(
    store: Store,
    *,
    pacing: Pacing,
    sleep: Sleep,
    guard: Guard | None = None,
    progress: Callable[[int], None] | None = None,
) -> Reclaimed:
    """Give free pages back in small write transactions. Only for `incremental(store)` files;
    `progress` hears the pages each step gave back. Stops once as many pages as were free at
    the start went back (pages that appends free meanwhile are left for them to reuse)."""
    began = time.perf_counter()
    with _driver(store) as conn:
        left = start = sqlite.free_pages(conn)
    before = checkpointed_size(store)
    freed = 0
    while left > 0 and freed < start:
        with store.write() as conn:
            if guard is not None:
                guard(conn)
            step, left = sqlite.reclaim_step(conn, min(pacing.step_pages, start - freed))
        freed += step
        if progress is not None:
            progress(step)
        checkpoint(store)
        sleep(pacing.pause_s)
    return Reclaimed(
        before, checkpointed_size(store), freed, start, round(time.perf_counter() - began, 3)
    )
