"""The clauses PostgreSQL search statements are built of, and the id windows they are read in:
filters, cursor and window bounds, the windows themselves (`windows`), the walk that asks them
one after another (`walk`), and reading a search index as a bitmap only (`index_only`) or the
primary key in id order only (`key_walk`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import psycopg

from shared.search.backend import Order
from shared.search.postgresql import ddl, limits

DB = psycopg.Connection[Any]


def past_clause(
    order: Order, cursor: int | None, params: list[object], column: str = "m.id"
) -> str:
    if cursor is None:
        return ""
    params.append(cursor)
    return f" AND {column} {'>' if order is Order.OLDEST else '<'} %s"


def direction(order: Order) -> str:
    return "ASC" if order is Order.OLDEST else "DESC"


def plain_clause(only: bool) -> str:
    """Keep only messages outside the substring index (no unsegmented text), when `only`."""
    return f" AND NOT {ddl.unsegmented()}" if only else ""


def without_jit(db: DB) -> None:
    """No JIT compilation for the rest of the transaction. The planner's costs for these
    statements run high (a walk of the primary key checking each row is costed as if it went
    to the oldest message; a plan it is pushed to by `index_only` or `key_walk` carries the
    disabled plans' penalty), so PostgreSQL's default `jit_above_cost` compiled and optimised
    them: 400 ms of LLVM for a 40 ms walk at 1.5M messages."""
    db.execute("SELECT set_config('jit', 'off', true)")


@contextmanager
def index_only(db: DB) -> Iterator[None]:
    """Within: no sequential scan and no walk of a b-tree, so the planner reads a search index
    as a bitmap (the transaction's settings come back after)."""
    with _planner_without(db, "enable_seqscan", "enable_indexscan"):
        yield


@contextmanager
def key_walk(db: DB) -> Iterator[None]:
    """Within: no bitmap and no sequential scan, so the planner walks the primary key in id
    order and checks each row, stopping at the LIMIT (the transaction's settings come back
    after)."""
    with _planner_without(db, "enable_seqscan", "enable_bitmapscan"):
        yield


@contextmanager
def serial(db: DB) -> Iterator[None]:
    """Within: no parallel workers (the transaction's setting comes back after). The planner
    estimates a window of the prefix index at 100 times the rows it holds and plans workers for
    it, whose start costs 30 ms on a busy 2-core machine where the scan itself takes 1 ms."""
    saved = db.execute("SELECT current_setting('max_parallel_workers_per_gather')").fetchone()
    assert saved is not None
    db.execute("SELECT set_config('max_parallel_workers_per_gather', '0', true)")
    try:
        yield
    finally:
        db.execute("SELECT set_config('max_parallel_workers_per_gather', %s, true)", [saved[0]])


@contextmanager
def _planner_without(db: DB, first: str, second: str) -> Iterator[None]:
    saved = db.execute("SELECT current_setting(%s), current_setting(%s)", [first, second])
    values = saved.fetchone()
    assert values is not None
    db.execute("SELECT set_config(%s, 'off', true), set_config(%s, 'off', true)", [first, second])
    try:
        yield
    finally:
        db.execute(
            "SELECT set_config(%s, %s, true), set_config(%s, %s, true)",
            [first, values[0], second, values[1]],
        )


def within_clause(ids: list[int] | None, params: list[object]) -> str:
    """Restrict to the probed matches (a primary-key lookup), when there are few."""
    if ids is None:
        return ""
    params.append(ids)
    return " AND m.id = ANY(%s)"


def windows(db: DB, few: list[int] | None, order: Order) -> list[int]:
    """The edges of the id windows a search asks one after another from the end `order`
    starts at (the newest end but for OLDEST): the last 1/64 of the id range, 1/16, 1/4, then the
    rest. Empty (one query over every id) when the probe found the few matches or the id range
    is under WINDOW_MIN_SPAN."""
    if few is not None:
        return []
    ids = id_range(db)
    if ids is None or ids[1] - ids[0] < limits.WINDOW_MIN_SPAN:
        return []
    low, high = ids
    span = high - low
    if order is Order.OLDEST:
        return sorted({low + span // share for share in limits.WINDOW_SHARES})
    return sorted({high - span // share for share in limits.WINDOW_SHARES}, reverse=True)


def id_range(db: DB) -> tuple[int, int] | None:
    """The lowest and highest message id (None: no messages)."""
    row = db.execute("SELECT min(id), max(id) FROM messages").fetchone()
    if row is None or row[0] is None:
        return None
    return int(row[0]), int(row[1])


def edge_clause(order: Order, edge: int | None, params: list[object], column: str = "m.id") -> str:
    """Keep a window's ids: from `edge` on toward the end the walk starts at."""
    if edge is None:
        return ""
    params.append(edge)
    return f" AND {column} {'<' if order is Order.OLDEST else '>='} %s"


def walk(
    db: DB,
    order: Order,
    edges: list[int],
    cursor: int | None,
    limit: int,
    query: Callable[[int | None, int | None, int], tuple[str, list[object]]],
    bitmap: bool = False,
) -> list[Any]:
    """The first `limit` rows past `cursor` in id order, exactly as one query over every id
    returns them, asked window by window (`edges`, from `windows`) and stopping once `limit`
    are found: with a bound on the id the planner reads the matches of one window (a word
    common across the table but rare in its newest messages, a phrase of two common words,
    a prefix) instead of all of them or the table's primary key down to the oldest.
    `query(cursor, edge, n)` is the SQL and parameters of n rows past cursor within the edge.
    With `bitmap` each window is read through its index as a bitmap, never by walking the
    primary key: the planner takes a phrase for as common as its words together, and walks
    the whole table (seconds at 1.5M messages) for two common words rarely side by side."""
    rows: list[Any] = []
    for edge in (*edges, None):
        if passed(order, cursor, edge):
            continue
        sql, params = query(cursor, edge, limit - len(rows))
        with index_only(db) if bitmap else nullcontext():
            rows += db.execute(sql, params).fetchall()
        if len(rows) >= limit or edge is None:
            break
        cursor = beyond(order, edge)
    return rows


def passed(order: Order, cursor: int | None, edge: int | None) -> bool:
    """Whether `cursor` is already past the window that ends at `edge`."""
    if edge is None or cursor is None:
        return False
    return cursor >= edge - 1 if order is Order.OLDEST else cursor <= edge


def beyond(order: Order, edge: int) -> int:
    """The cursor that goes on past the window ending at `edge`."""
    return edge - 1 if order is Order.OLDEST else edge
