"""PostgreSQL search backend: the same shapes, syntax and results as `shared.search.sqlite`.

Indexes (DDL in `ddl`): words in `messages.search_words` (tsvector, GIN), substrings of
messages in unsegmented scripts in a GIN index of their 1- and 2-character pieces. Routing
(which index a query runs on) is `shared.search.routing`, shared with SQLite. Substring
matches are checked on the text (`strpos`) before they count, so substring search is exact.

Bounded work at any size:
- `newest`/`oldest` read matches in id order, a batch at a time, and stop as soon as the caller
  has enough sessions.
- relevance ranks with `ts_rank` (length-normalised) inside windows of the newest RANK_WINDOW
  matches, newest window first (as SQLite does with bm25). ts_rank weighs each row on its own,
  with no count over the whole index, so every term may be weighed; ties go to the newest.
- a query with a term of 1-2 characters (`我`) first checks the newest SCAN_ROWS messages in
  the substring index directly (a common character is found there at once, where its index
  entry lists most such messages), then goes on through the index past them.
- substring matches carry no weight of their own: they come newest first.
- a word query with more than FEW matches, and the substring index past the directly checked
  messages, ask the newest ids first: the last 1/64 of the id range, then 1/16, 1/4, the rest
  (`_walk`), stopping once a batch is full, so the planner reads one window's matches rather
  than all of them (or the primary key down to the oldest); a phrase is read as a bitmap
  in each window, never by walking the primary key. The hits are those of one query.
- a phrase also narrows through the index of adjacent word pairs (`ddl.pairs`,
  `compile_pairs`): the rows re-read to check positions are those holding its pairs, not every
  row holding its words.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import Any

import psycopg
from sqlalchemy import Connection

from shared.search.backend import Filters, Hit, Order
from shared.search.postgresql import ddl
from shared.search.postgresql.compiler import (
    PIECE,
    compile_pairs,
    compile_substrings,
    compile_words,
    fold,
    predicate,
)
from shared.search.postgresql.rows import around as around
from shared.search.postgresql.rows import count_between as count_between
from shared.search.postgresql.rows import db_of as _db
from shared.search.postgresql.rows import ends as ends
from shared.search.postgresql.rows import first_text as first_text
from shared.search.postgresql.rows import marks as _marks
from shared.search.postgresql.rows import message as message
from shared.search.postgresql.rows import parents as parents
from shared.search.postgresql.rows import recent_sessions as recent_sessions
from shared.search.postgresql.rows import sessions_by_id as sessions_by_id
from shared.search.postgresql.rows import visible as _visible
from shared.search.query import Node, Query
from shared.search.routing import merge, routes

RANK_WINDOW = 256  # matches ranked by ts_rank at a time
MAX_WINDOWS = 40  # relevance looks at most at this many windows (~10,000 matches)
BATCH = 64  # hits fetched at a time in id order
SCAN_ROWS = 2000  # newest substring-indexed messages checked directly for a short term
SCAN_CHUNK = 500
RANK_NORMALIZATION = 1  # ts_rank divided by 1 + log(length): shorter messages first, like bm25
FEW = 1000  # a word query with at most this many matches reads them all from the word index
PROBE_SQL = f"SELECT m.id FROM messages AS m WHERE {{matching}} LIMIT {FEW + 1}"
# Above this many matches by the planner's estimate the probe is skipped: such a word is in the
# column's most-common-elements statistics, so the estimate is measured, not guessed, and the
# id-order walk finds a batch at once, while the probe would build the word's whole bitmap.
COMMON = 20 * FEW
# A word search with more than FEW matches asks the newest ids first (`_walk`): the newest
# 1/64 of the id range, 1/16, 1/4, then the rest, when the range spans at least this many ids.
WINDOW_MIN_SPAN = 50_000
# A pair outside the most common elements of the pairs index's statistics is estimated at
# about half the rarest of them (6,162 rows at 1.5M messages): a few thousand rows at most.
FEW_PAIRS = 8000
PAIRS_BIAS = 4  # how much more rows a phrase's pairs may be estimated at and still drive it
WINDOW_SHARES = (64, 16, 4)
ESTIMATE_SQL = "EXPLAIN (FORMAT JSON) SELECT 1 FROM messages AS m WHERE {matching}"

DB = psycopg.Connection[Any]


@dataclass(frozen=True)
class Words:
    """A word query: its tsquery; with `pairs`, the pairs index's tsquery that drives it.

    Driven by the pairs index, the words are checked on each row the pairs admit, never read
    from the word index: ANDed into one bitmap with a phrase (which GIN must re-check on the
    row), every row's pairs would be computed again in that re-check (up to a millisecond for
    a long message). `estimate`: the planner's count of the rows the index reads, once known."""

    tsquery: str
    pairs: str | None = None
    estimate: float | None = None
    at_once: bool = False  # read in one bitmap over every id (`_reading`)

    def matching(self, params: list[object]) -> str:
        """The condition on `m` (its parameters appended)."""
        if self.pairs is None:
            params.append(self.tsquery)
            return "m.search_words @@ %s::tsquery"
        params.extend((self.pairs, self.tsquery))
        return (
            f"{ddl.pairs()} @@ %s::tsquery AND {ddl.paired()}"
            " AND (m.search_words @@ %s::tsquery) IS TRUE"
        )

    @property
    def ids(self) -> str:
        """The id as the bounds of a window compare it. Driven by the pairs (a few thousand
        rows), a bound is checked on those rows, not read as a bitmap of the primary key's
        range, which the planner ANDs in and which costs 17 ms for 100,000 ids."""
        return "(m.id + 0)" if self.at_once else "m.id"

    @property
    def phrase(self) -> bool:
        """Whether it holds a phrase (words side by side: `compile_words` writes `<->`)."""
        return "<->" in self.tsquery


def _filter_sql(filters: Filters, params: list[object]) -> tuple[str, str]:
    """(JOIN clause, WHERE conditions) for roles, source, the excluded session and the viewer."""
    where = f" AND m.role IN ({_marks(filters.roles)})"
    params.extend(filters.roles)
    join = ""
    if filters.exclude_session_id is not None:
        where += " AND m.session_id != %s"
        params.append(filters.exclude_session_id)
    if filters.source is not None:
        where += " AND s.source = %s"
        params.append(filters.source)
    reached = _visible(filters.viewer, "s", params)
    where += reached
    if filters.source is not None or reached:
        join = " JOIN sessions AS s ON s.id = m.session_id"
    return join, where


def _past(order: Order, cursor: int | None, params: list[object], column: str = "m.id") -> str:
    if cursor is None:
        return ""
    params.append(cursor)
    return f" AND {column} {'>' if order is Order.OLDEST else '<'} %s"


def _direction(order: Order) -> str:
    return "ASC" if order is Order.OLDEST else "DESC"


def _plain(only: bool) -> str:
    """Keep only messages outside the substring index (no unsegmented text), when `only`."""
    return f" AND NOT {ddl.unsegmented()}" if only else ""


def _few(db: DB, words: Words) -> list[int] | None:
    """Every message matching `words` when there are at most FEW of them; else None, or FEW + 1
    of them when the probe ran (the bitmap returns them in the table's order, the oldest ids).

    Read through the word index only (bitmap scan, no id order): with `ORDER BY id LIMIT n`
    the planner walks the primary key and filters whenever it expects many matches, and for a
    word it misjudges as common that walk reads most of the table (seconds at 1.5M messages).
    A word the planner knows to be common (estimate over COMMON) is not probed: its bitmap
    would list most of the table before the first FEW+1 rows come back."""
    estimate = words.estimate if words.estimate is not None else _estimated_rows(db, words)
    if estimate > COMMON:
        return None
    params: list[object] = []
    sql = PROBE_SQL.format(matching=words.matching(params))
    with _index_only(db):
        rows = db.execute(sql, params).fetchall()
    return [int(row[0]) for row in rows]


@contextmanager
def _index_only(db: DB) -> Iterator[None]:
    """Within: no sequential scan and no walk of a b-tree, so the planner reads a search index
    as a bitmap (the transaction's settings come back after)."""
    saved = db.execute(
        "SELECT current_setting('enable_seqscan'), current_setting('enable_indexscan')"
    ).fetchone()
    assert saved is not None
    db.execute(
        "SELECT set_config('enable_seqscan', 'off', true),"
        " set_config('enable_indexscan', 'off', true)"
    )
    try:
        yield
    finally:
        db.execute(
            "SELECT set_config('enable_seqscan', %s, true),"
            " set_config('enable_indexscan', %s, true)",
            [saved[0], saved[1]],
        )


def _estimated_rows(db: DB, words: Words) -> float:
    """The planner's estimate of the messages matching `words` (planning only, no scan)."""
    params: list[object] = []
    return _planned_rows(db, words.matching(params), params)


def _planned_rows(db: DB, matching: str, params: list[object]) -> float:
    """The planner's estimate of the messages meeting the condition `matching` on `m`."""
    row = db.execute(ESTIMATE_SQL.format(matching=matching), params).fetchone()
    assert row is not None
    return float(row[0][0]["Plan"]["Plan Rows"])


def _driven(db: DB, tree: Node, tsquery: str, roles: Sequence[str]) -> Words:
    """The word query of `tree`, driven by the index the planner expects to read fewer rows
    from: the word index, or the pairs index when the tree's phrases narrow it (a phrase of two
    common words: its pairs are in a few thousand messages, its words together in 40,000) and
    the search leaves out tool output (which the pairs index does)."""
    words = Words(tsquery)
    by_words = _estimated_rows(db, words)
    pairs = None if ddl.PAIRED_OUT in roles else compile_pairs(tree)
    if pairs is None:
        return Words(tsquery, None, by_words)
    by_pairs = _planned_rows(db, f"{ddl.pairs()} @@ %s::tsquery AND {ddl.paired()}", [pairs])
    # The word index reads every row holding the phrase's words, wherever they stand, and the
    # planner counts words as if they met by chance: 'again' & 'one' was estimated at 5,255 rows
    # and held 12,637 (390 ms to re-check). A pair outside the column's most common elements is
    # estimated as half the rarest of them (6,162 for 'again one', which is in 141 rows). So the
    # pairs drive unless the words are far more selective (`"in the" quokka`).
    read_by_words = _estimated_rows(db, Words(tsquery.replace(" <-> ", " & ")))
    if by_pairs < PAIRS_BIAS * read_by_words:
        return Words(tsquery, pairs, by_pairs)
    return Words(tsquery, None, by_words)


def _within(ids: list[int] | None, params: list[object]) -> str:
    """Restrict to the probed matches (a primary-key lookup), when there are few."""
    if ids is None:
        return ""
    params.append(ids)
    return " AND m.id = ANY(%s)"


def _windows(db: DB, few: list[int] | None, order: Order) -> list[int]:
    """The edges of the id windows a search asks one after another from the end `order`
    starts at (the newest end but for OLDEST): the last 1/64 of the id range, 1/16, 1/4, then the
    rest. Empty (one query over every id) when the probe found the few matches or the id range
    is under WINDOW_MIN_SPAN."""
    if few is not None:
        return []
    ids = _id_range(db)
    if ids is None or ids[1] - ids[0] < WINDOW_MIN_SPAN:
        return []
    low, high = ids
    span = high - low
    if order is Order.OLDEST:
        return sorted({low + span // share for share in WINDOW_SHARES})
    return sorted({high - span // share for share in WINDOW_SHARES}, reverse=True)


def _id_range(db: DB) -> tuple[int, int] | None:
    """The lowest and highest message id (None: no messages)."""
    row = db.execute("SELECT min(id), max(id) FROM messages").fetchone()
    if row is None or row[0] is None:
        return None
    return int(row[0]), int(row[1])


def _edge(order: Order, edge: int | None, params: list[object], column: str = "m.id") -> str:
    """Keep a window's ids: from `edge` on toward the end the walk starts at."""
    if edge is None:
        return ""
    params.append(edge)
    return f" AND {column} {'<' if order is Order.OLDEST else '>='} %s"


def _walk(
    db: DB,
    order: Order,
    edges: list[int],
    cursor: int | None,
    limit: int,
    query: Callable[[int | None, int | None, int], tuple[str, list[object]]],
    bitmap: bool = False,
) -> list[Any]:
    """The first `limit` rows past `cursor` in id order, exactly as one query over every id
    returns them, asked window by window (`edges`, from `_windows`) and stopping once `limit`
    are found: with a bound on the id the planner reads the matches of one window (a word
    common across the table but rare in its newest messages, a phrase of two common words,
    a prefix) instead of all of them or the table's primary key down to the oldest.
    `query(cursor, edge, n)` is the SQL and parameters of n rows past cursor within the edge.
    With `bitmap` each window is read through its index as a bitmap, never by walking the
    primary key: the planner takes a phrase for as common as its words together, and walks
    the whole table (seconds at 1.5M messages) for two common words rarely side by side."""
    oldest = order is Order.OLDEST
    rows: list[Any] = []
    for edge in (*edges, None):
        if (
            edge is not None
            and cursor is not None
            and (cursor >= edge - 1 if oldest else cursor <= edge)
        ):
            continue  # the cursor is already past this window
        sql, params = query(cursor, edge, limit - len(rows))
        with _index_only(db) if bitmap else nullcontext():
            rows += db.execute(sql, params).fetchall()
        if len(rows) >= limit or edge is None:
            break
        cursor = edge - 1 if oldest else edge
    return rows


def _reading(db: DB, words: Words, order: Order) -> tuple[Words, list[int] | None, list[int]]:
    """How a word query's matches are read: (the query, marked `at_once` or not; the few
    matches probed, or None; the id windows).

    A word query is probed for its few matches (`_few`). Past FEW, the probe's oldest matches
    tell how densely the word occurs, so how many matches it has in all (the planner's
    estimate is no bound for a prefix: 'prea':* was estimated at 13,497 rows and is in 83,679).
    Up to COMMON matches are read at once: in one bitmap of the index over every id, with the
    bounds checked on its rows, where each id window would read them all again and where the
    planner, expecting many in a window, walks the primary key and checks every row ('loxc*':
    4,492 matches, 41,000 rows checked in the 1/4 window, 140 ms; at once, 17 ms). More are
    read window by window. A query driven by pairs is not probed (the pairs index names a few
    thousand rows at most, which the probe would read twice): at once when the planner expects
    at most FEW_PAIRS of them, else window by window ('in the', 8,737 rows by its pairs)."""
    if words.pairs is not None:
        if words.estimate is not None and words.estimate <= FEW_PAIRS:
            return replace(words, at_once=True), None, []
        return words, None, _windows(db, None, order)
    found = _few(db, words)
    if found is not None and len(found) <= FEW:
        return words, found, []
    if found is not None and _spread(db, found) <= COMMON:
        return replace(words, at_once=True), None, []
    return words, None, _windows(db, None, order)


def _spread(db: DB, oldest: list[int]) -> float:
    """How many matches a word has in all, from `oldest` (its oldest matches): as many more in
    the rest of the id range as are there in the part they span."""
    ids = _id_range(db)
    if ids is None:
        return 0.0
    low, high = ids
    spanned = max(max(oldest) - low + 1, 1)
    return len(oldest) * (high - low + 1) / spanned


def _ordered_words(
    db: DB, words: Words, filters: Filters, order: Order, plain: bool
) -> Iterator[Hit]:
    cursor: int | None = None
    words, few, edges = _reading(db, words, order)
    if few == []:
        return

    def query(past: int | None, edge: int | None, n: int) -> tuple[str, list[object]]:
        params: list[object] = []
        matching = words.matching(params)
        inside = _within(few, params)
        bound = _past(order, past, params, words.ids) + _edge(order, edge, params, words.ids)
        join, where = _filter_sql(filters, params)
        return (
            f"SELECT m.id, m.session_id FROM messages AS m{join}"
            f" WHERE {matching}{inside}{bound}{where}{_plain(plain)}"
            f" ORDER BY m.id {_direction(order)} LIMIT {n}",
            params,
        )

    while True:
        rows = _walk(db, order, edges, cursor, BATCH, query, words.phrase or words.at_once)
        for row in rows:
            yield Hit(int(row[0]), str(row[1]), 0.0, "words")
        if len(rows) < BATCH:
            return
        cursor = int(rows[-1][0])


def _ranked_words(db: DB, words: Words, filters: Filters, plain: bool) -> Iterator[Hit]:
    """ts_rank order inside windows of the newest RANK_WINDOW matches, newest window first;
    the rank is computed on the window's rows only."""
    upper: int | None = None
    words, few, edges = _reading(db, words, Order.NEWEST)
    if few == []:
        return

    def query(past: int | None, edge: int | None, n: int) -> tuple[str, list[object]]:
        params: list[object] = [words.tsquery]
        matching = words.matching(params)
        inside = _within(few, params)
        bound = _past(Order.NEWEST, past, params, words.ids)
        bound += _edge(Order.NEWEST, edge, params, words.ids)
        join, where = _filter_sql(filters, params)
        return (
            f"SELECT w.id, w.session_id, ts_rank(w.search_words, %s::tsquery,"
            f" {RANK_NORMALIZATION}) FROM (SELECT m.id, m.session_id, m.search_words"
            f" FROM messages AS m{join} WHERE {matching}{inside}{bound}"
            f"{where}{_plain(plain)} ORDER BY m.id DESC LIMIT {n}) AS w",
            params,
        )

    for _ in range(MAX_WINDOWS):
        bitmap = words.phrase or words.at_once
        rows = _walk(db, Order.NEWEST, edges, upper, RANK_WINDOW, query, bitmap)
        rows.sort(key=lambda r: (-float(r[2]), -int(r[0])))
        for row in rows:
            yield Hit(int(row[0]), str(row[1]), -float(row[2]), "words")
        if len(rows) < RANK_WINDOW:
            return
        upper = min(int(r[0]) for r in rows)


def _short(tree: Node) -> bool:
    return any(len(fold(t.text)) <= PIECE for t in Query(tree).terms())


def _scanned(db: DB, tree: Node, filters: Filters, order: Order) -> Iterator[Hit | int | None]:
    """Check the newest (oldest) substring-indexed messages directly: hits, then the cursor
    to go on from (None: every such message was checked)."""
    cursor: int | None = None
    seen = 0
    while seen < SCAN_ROWS:
        params: list[object] = []
        bound = _past(order, cursor, params)
        chunk = db.execute(
            f"SELECT m.id FROM messages AS m WHERE {ddl.unsegmented()}{bound}"
            f" ORDER BY m.id {_direction(order)} LIMIT {SCAN_CHUNK}",
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
        if len(chunk) < SCAN_CHUNK:
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
            f" LIMIT {FEW + 1}",
            params,
        ).fetchall()
    return None if len(rows) > FEW else [int(row[0]) for row in rows]


def _indexed_substrings(
    db: DB,
    tree: Node,
    filters: Filters,
    order: Order,
    cursor: int | None,
    few: list[int] | None,
) -> Iterator[Hit]:
    """Matches through the piece index in id order (past `cursor`), checked on the text, asked
    window by window (`_walk`): a piece in many messages (`的`, `配置`) has its matches in the
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
        rows = _walk(db, order, edges, cursor, BATCH, query)
        for row in rows:
            yield Hit(int(row[0]), str(row[1]), 0.0, "substrings")
        if len(rows) < BATCH:
            return
        cursor = int(rows[-1][0])


def _substring_hits(db: DB, tree: Node, filters: Filters, order: Order) -> Iterator[Hit]:
    walk = Order.OLDEST if order is Order.OLDEST else Order.NEWEST
    cursor: int | None = None
    few = _few_pieces(db, tree)
    if _short(tree) and few is None:  # a few matches are read at once, not looked for
        rest = True
        for item in _scanned(db, tree, filters, walk):
            if isinstance(item, Hit):
                yield item
            else:
                rest, cursor = item is not None, item
        if not rest:
            return
    yield from _indexed_substrings(db, tree, filters, walk, cursor, few)


def hits(conn: Connection, query: Query, filters: Filters, order: Order) -> Iterator[Hit]:
    """Matching messages, best first for the order, each once; lazy, so callers stop early."""
    db = _db(conn)
    routed = routes(query)
    streams: list[Iterator[Hit]] = []
    for word_tree, plain in ((routed.words, False), (routed.plain_words, True)):
        tsquery = None if word_tree is None else compile_words(word_tree)
        if word_tree is None or tsquery is None:
            continue
        words = _driven(db, word_tree, tsquery, filters.roles)
        if order is Order.RELEVANCE:
            streams.append(_ranked_words(db, words, filters, plain))
        else:
            streams.append(_ordered_words(db, words, filters, order, plain))
    if routed.substrings is not None:
        streams.append(_substring_hits(db, routed.substrings, filters, order))
    if not streams:
        return
    seen: set[int] = set()
    for hit in merge(streams, order):
        if hit.message_id not in seen:
            seen.add(hit.message_id)
            yield hit


def snippets(conn: Connection, query: Query, found: Sequence[Hit]) -> dict[int, str]:
    """None of its own: the engine marks the matched words and substrings (`views.highlight`),
    the same way on every dialect."""
    return {}
