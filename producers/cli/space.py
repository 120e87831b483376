"""state.db on disk: its size with the WAL, and giving freed pages back after a prune."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from shared.db import OperationalError, Store, sqlite
from shared.store import reclaim as reclaim_store

FULL_VACUUM_WARNING = (
    "state.db predates incremental auto-vacuum: reclaiming with a full VACUUM, which locks out "
    "every writer (running chats and gateways) until it ends."
)


class ReclaimError(RuntimeError):
    """Space could not be given back now (another process holds the database); the prune
    itself stands."""


def file_sizes(path: Path) -> tuple[int, int]:
    """Bytes of state.db and of its -wal (0 for a file that is not there)."""
    return sqlite.file_bytes(path)


def total_bytes(path: Path) -> int:
    return sum(file_sizes(path))


def reclaim(
    store: Store,
    pacing: reclaim_store.Pacing,
    *,
    warn: Callable[[str], None],
    sleep: reclaim_store.Sleep = time.sleep,
) -> tuple[int, int] | None:
    """Give freed pages back to the file system: (bytes before, after), WAL included.

    SQLite only (None for a server database, whose own vacuum does this). A file made by
    hermes-fleet gives them back a few hundred pages per short write transaction, so turn
    writes keep flowing; an older file (no incremental auto-vacuum) needs a full VACUUM,
    and `warn` hears that first.
    """
    if store.path is None or not reclaim_store.is_sqlite_file(store):
        return None
    before = total_bytes(store.path)
    if reclaim_store.incremental(store):
        try:
            reclaim_store.reclaim_space(store, pacing=pacing, sleep=sleep)
        except OperationalError as error:
            raise ReclaimError(str(error.orig)) from None
        reclaim_store.truncate_wal(store)
    else:
        warn(FULL_VACUUM_WARNING)
        _vacuum(store)
    return before, total_bytes(store.path)


def _vacuum(store: Store) -> None:
    try:
        sqlite.full_vacuum(store.engine)
    except sqlite3.Error as error:
        raise ReclaimError(str(error)) from None
