"""state.db on disk: its size with the WAL, and giving freed pages back after a prune."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from shared.store import Store


class ReclaimError(RuntimeError):
    """VACUUM could not run (another process holds the database); the prune itself stands."""


def file_sizes(path: Path) -> tuple[int, int]:
    """Bytes of state.db and of its -wal (0 for a file that is not there)."""
    sizes = []
    for candidate in (path, Path(f"{path}-wal")):
        try:
            sizes.append(candidate.stat().st_size)
        except OSError:
            sizes.append(0)
    return sizes[0], sizes[1]


def total_bytes(path: Path) -> int:
    return sum(file_sizes(path))


def reclaim(store: Store) -> tuple[int, int] | None:
    """Checkpoint the WAL into state.db, VACUUM, truncate the WAL: (bytes before, after).

    SQLite only (None for a server database, whose own vacuum does this). VACUUM cannot run
    inside a transaction, so it goes through a driver connection in autocommit mode; its
    errors are the driver's own, raised here as ReclaimError.
    """
    if store.path is None or store.dialect != "sqlite":
        return None
    before = total_bytes(store.path)
    raw = store.engine.raw_connection()
    try:
        cursor = raw.cursor()
        try:
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            cursor.execute("VACUUM")
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as error:
            raise ReclaimError(str(error)) from None
        finally:
            cursor.close()
    finally:
        raw.close()
    return before, total_bytes(store.path)
