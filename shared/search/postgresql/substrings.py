"""Substring queries on PostgreSQL: matches through the index of 1- and 2-character pieces,
checked on the text. A term whose pieces are in more than FEW messages first checks the newest
substring-indexed messages directly (`substring_hits`): SCAN_ROWS of them for a short term, one
SCAN_CHUNK for a longer one, which a dense term (`について`) fills its first batch from where the
piece index's window read 5,600 rows for it (90-470 ms at 1.5M messages).
"""

from __future__ import annotations

from collections.abc import Iterator

from shared.search.backend import Filters, Hit, Order
from shared.search.postgresql import ddl, limits
from shared.search.postgresql.compiler import PIECE, compile_substrings, fold, predicate
from shared.search.postgresql.rows import filter_sql as _filter_sql
from shared.search.postgresql.windows import DB
from shared.search.postgresql.windows import direction as _direction
from shared.search.postgresql.windows import edge_clause as _edge
from shared.search.postgresql.windows import index_only as _index_only
from shared.search.postgresql.windows import past_clause as _past
from shared.search.postgresql.windows import walk as _walk
from shared.search.postgresql.windows import windows as _windows
from shared.search.postgresql.windows import within_clause as _within
from shared.search.query import Node, Query


def _short(tree: Node) -> bool:
    return any(len(fold(t.text)) <= PIECE for t in Query(tree).terms())


def _scanned(
    db: DB, tree: Node, filters: Filters, order: Order, most: int
) -> Iterator[Hit | int | None]:
    """Check the newest (oldest) substring-indexed messages directly, `most` of them at most:
    hits, then the cursor to go on from (None: every such message was checked)."""
    cursor: int | None = None
    seen = 0
    while seen < most:
        params: list[object] = []
        bound = _past(order, cursor, params)
        chunk = db.execute(
            f"SELECT m.id FROM messages AS m WHERE {ddl.unsegmented()}{bound}"
            f" ORDER BY m.id {_direction(order)} LIMIT {limits.SCAN_CHUNK}",
            params,
        ).fetchall()
        if not chunk:
            yield None
            return
        seen += len(chunk)
        ids = [int(row[0]) for row in chunk]
        params = [ids]
        condition = predicate(tree, params)
        join, where = _filter_sql(filters, params)
        rows = db.execute(
            f"SELECT m.id, m.session_id FROM messages AS m{join}"
            f" WHERE m.id = ANY(%s) AND {condition}{where} ORDER BY m.id {_direction(order)}",
            params,
        ).fetchall()
        for row in rows:
            yield Hit(int(row[0]), str(row[1]), 0.0, "substrings")
        cursor = ids[-1]
        if len(chunk) < limits.SCAN_CHUNK:
            yield None
            return
    yield cursor


def _few_pieces(db: DB, tree: Node) -> list[int] | None:
    """The messages holding every piece of `tree` when there are at most FEW, else None: a
    rare piece is read from its index entry at once, where a window of the id range would
    first list the window's ids (86 ms for the 1/4 window at 1.5M messages). None too when
    `tree` has no piece the index holds."""
    params: list[object] = []
    narrowing = compile_substrings(tree, params)
    if narrowing is None:
        return None
    with _index_only(db):
        rows = db.execute(
            f"SELECT m.id FROM messages AS m WHERE {ddl.unsegmented()} AND {narrowing}"
            f" LIMIT {limits.FEW + 1}",
            params,
        ).fetchall()
    return None if len(rows) > limits.FEW else [int(row[0]) for row in rows]


def _indexed_substrings(
    db: DB,
    tree: Node,
    filters: Filters,
    order: Order,
    cursor: int | None,
    few: list[int] | None,
) -> Iterator[Hit]:
    """Matches through the piece index in id order (past `cursor`), checked on the text, asked
    window by window (`walk`): a piece in many messages (`的`, `配置`) has its matches in the
    newest window read and checked, not all of them for every batch."""
    if compile_substrings(tree, []) is None or few == []:
        return
    edges = _windows(db, few, order)

    def query(past: int | None, edge: int | None, n: int) -> tuple[str, list[object]]:
        params: list[object] = []
        # the probed ids are read by primary key: the pieces' condition would then be
        # computed on each row's text (half a millisecond a message), not looked up
        narrowing = "TRUE" if few is not None else compile_substrings(tree, params)
        inside = _within(few, params)
        condition = predicate(tree, params)
        bound = _past(order, past, params) + _edge(order, edge, params)
        join, where = _filter_sql(filters, params)
        return (
            f"SELECT m.id, m.session_id FROM messages AS m{join}"
            f" WHERE {ddl.unsegmented()} AND {narrowing}{inside} AND {condition}{bound}{where}"
            f" ORDER BY m.id {_direction(order)} LIMIT {n}",
            params,
        )

    while True:
        rows = _walk(db, order, edges, cursor, limits.BATCH, query)
        for row in rows:
            yield Hit(int(row[0]), str(row[1]), 0.0, "substrings")
        if len(rows) < limits.BATCH:
            return
        cursor = int(rows[-1][0])


def substring_hits(db: DB, tree: Node, filters: Filters, order: Order) -> Iterator[Hit]:
    walk = Order.OLDEST if order is Order.OLDEST else Order.NEWEST
    cursor: int | None = None
    few = _few_pieces(db, tree)
    if few is None:  # a few matches are read at once, not looked for
        most = limits.SCAN_ROWS if _short(tree) else limits.SCAN_CHUNK
        rest = True
        for item in _scanned(db, tree, filters, walk, most):
            if isinstance(item, Hit):
                yield item
            else:
                rest, cursor = item is not None, item
        if not rest:
            return
    yield from _indexed_substrings(db, tree, filters, walk, cursor, few)
