"""bench/store.py on PostgreSQL: the corpus built in state.db is copied into a fresh schema of
the given database by `hermes db copy`'s own code (`shared.db.copy.copy_store`: ids, every
column and the counters as they are, parents set after every session is there, verified), then
the same appends, listing, stats and export are timed there, with the index pending sweep
running on beat's schedule beside the appends, as in a deployment.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import text

from bench.common import fresh_schema
from shared.db.copy import copy_store
from shared.db.engine import Store, connect, open_store
from shared.sections import MaintenanceSettings
from shared.store import reclaim


def copy_corpus(sqlite_path: Path, database_url: str, report: Any) -> tuple[Store, float]:
    """A Store on a fresh schema of `database_url` holding state.db's sessions and messages."""
    started = time.perf_counter()
    url = fresh_schema(database_url, "store")
    assert url is not None
    source_url = f"sqlite:///{sqlite_path}"
    source = connect(source_url)
    copied: dict[str, int] = {}

    def on_rows(table: str, rows: int) -> None:
        before = copied.get(table, 0)
        copied[table] = before + rows
        if copied[table] // 50_000 > before // 50_000:
            report(f"  copied {copied[table]:,} {table}")

    try:
        copy_store(source, source_url, url, on_rows=on_rows)
    finally:
        source.close()
    target = open_store(url)
    with target.write() as conn:
        conn.execute(text("ANALYZE"))
    return target, time.perf_counter() - started


@contextmanager
def pending_sweep(store: Store, every: float | None = None) -> Iterator[list[int]]:
    """Beat's index pending sweep (`reclaim.flush_pending_lists`, every
    `maintenance.index_pending_seconds` by default; 0: never) in a thread for the block; the
    pages each run moved are in the list afterwards."""
    period = every if every is not None else MaintenanceSettings().index_pending_seconds
    moved: list[int] = []
    if period <= 0:
        yield moved
        return
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(period):
            moved.append(sum(reclaim.flush_pending_lists(store).values()))

    thread = threading.Thread(target=run, name="index-pending-sweep", daemon=True)
    thread.start()
    try:
        yield moved
    finally:
        stop.set()
        thread.join()
