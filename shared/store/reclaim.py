"""Pruning without stalling turn writes: short delete batches, then space back a step at a time.

Shared by beat's retention sweep and `hermes sessions prune`. Each delete batch is one short
write transaction (bounded by sessions and by messages), followed, outside the write lock, by
a PASSIVE WAL checkpoint and a pause; freed pages then go back to the file system a few
hundred per write transaction (incremental auto-vacuum), never in one VACUUM. The clock-free
parts are here; what is SQLite-only (checkpoint, incremental vacuum, sizes) is in `sqlite`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Connection

from shared.settings import MaintenanceSettings
from shared.store import sqlite
from shared.store.engine import Store
from shared.store.sessions import prune_batch

# Runs first inside every write transaction (the sweep checks its lease there); raises to stop.
Guard = Callable[[Connection], None]
Sleep = Callable[[float], None]
BATCH_SESSIONS = 50
# Deleting a message costs its FTS5 and trigram entries too (and the merges they start): at a
# million messages a batch of 300 held the write lock up to ~100 ms and wrote ~5,000 WAL pages,
# 100 up to ~45 ms. bench/maintenance.py measures the stall a turn write sees.
BATCH_MESSAGES = 200


@dataclass(frozen=True, slots=True)
class Pacing:
    """How hard a prune may lean on the write lock."""

    batch_sessions: int = BATCH_SESSIONS
    batch_messages: int = BATCH_MESSAGES
    step_pages: int = 256  # free pages given back per write transaction
    pause_s: float = 0.02  # after each batch or step, so queued turn writes go first


def pacing_for(maintenance: MaintenanceSettings, *, batch_sessions: int = BATCH_SESSIONS) -> Pacing:
    """The pacing `maintenance.vacuum_step_pages` and `.vacuum_pause_ms` ask for."""
    return Pacing(
        batch_sessions=batch_sessions,
        batch_messages=BATCH_MESSAGES,
        step_pages=maintenance.vacuum_step_pages,
        pause_s=maintenance.vacuum_pause_ms / 1000,
    )


@dataclass(frozen=True, slots=True)
class Reclaimed:
    bytes_before: int  # state.db after a PASSIVE checkpoint, before the first step
    bytes_after: int
    pages_freed: int


def prune_in_batches(
    store: Store,
    *,
    ended_before: float,
    source: str | None = None,
    pacing: Pacing,
    sleep: Sleep,
    guard: Guard | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[int, int]:
    """Delete every prunable session, a short batch at a time: (sessions, messages) deleted.

    `progress` hears each batch's (sessions, messages).
    """
    sessions = messages = 0
    while True:
        with store.write() as conn:
            if guard is not None:
                guard(conn)
            gone, taken = prune_batch(
                conn,
                ended_before=ended_before,
                source=source,
                limit=pacing.batch_sessions,
                max_messages=pacing.batch_messages,
            )
        sessions += gone
        messages += taken
        if gone == 0 and taken == 0:
            return sessions, messages
        if progress is not None:
            progress(gone, taken)
        checkpoint(store)
        sleep(pacing.pause_s)


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


def reclaim_space(
    store: Store,
    *,
    pacing: Pacing,
    sleep: Sleep,
    guard: Guard | None = None,
    progress: Callable[[int], None] | None = None,
) -> Reclaimed:
    """Give free pages back in small write transactions. Only for `incremental(store)` files;
    `progress` hears the pages each step gave back."""
    with _driver(store) as conn:
        left = sqlite.free_pages(conn)
    before = checkpointed_size(store)
    freed = 0
    while left > 0:
        with store.write() as conn:
            if guard is not None:
                guard(conn)
            step, left = sqlite.reclaim_step(conn, pacing.step_pages)
        freed += step
        if progress is not None:
            progress(step)
        checkpoint(store)
        sleep(pacing.pause_s)
    return Reclaimed(before, checkpointed_size(store), freed)
