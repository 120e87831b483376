"""Word queries on PostgreSQL: how one is read (`Words`; the probe for its few matches, the
planner's estimates, the pairs index or the word index to drive it, at once or window by window)
and its hits in id order (`ordered_words`) or ranked by ts_rank (`ranked_words`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from shared.search.backend import Filters, Hit, Order
from shared.search.postgresql import ddl, limits
from shared.search.postgresql.compiler import compile_pairs
from shared.search.postgresql.rows import filter_sql as _filter_sql
from shared.search.postgresql.windows import DB
from shared.search.postgresql.windows import beyond as _beyond
from shared.search.postgresql.windows import direction as _direction
from shared.search.postgresql.windows import edge_clause as _edge
from shared.search.postgresql.windows import id_range as _id_range
from shared.search.postgresql.windows import index_only as _index_only
from shared.search.postgresql.windows import key_walk as _key_walk
from shared.search.postgresql.windows import passed as _passed
from shared.search.postgresql.windows import past_clause as _past
from shared.search.postgresql.windows import plain_clause as _plain
from shared.search.postgresql.windows import walk as _walk
from shared.search.postgresql.windows import windows as _windows
from shared.search.postgresql.windows import within_clause as _within
from shared.search.query import Node

ESTIMATE_SQL = "EXPLAIN (FORMAT JSON) SELECT 1 FROM messages AS m WHERE {matching}"


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
    at_once: bool = False  # read in one bitmap over every id (`reading`)

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
    def prefix(self) -> bool:
        """Whether it holds a prefix (`deploy*`: `compile_words` writes `:*`)."""
        return ":*" in self.tsquery

    @property
    def phrase(self) -> bool:
        """Whether it holds a phrase (words side by side: `compile_words` writes `<->`)."""
        return "<->" in self.tsquery


def _few(db: DB, words: Words) -> list[int] | None:
    """Every message matching `words` when there are at most FEW of them; else None, or FEW + 1
    of them when the probe ran (the bitmap returns them in the table's order, the oldest ids).

    Read through the word index only (bitmap scan, no id order): with `ORDER BY id LIMIT n`
    the planner walks the primary key and filters whenever it expects many matches, and for a
    word it misjudges as common that walk reads most of the table (seconds at 1.5M messages).
    A word the planner knows to be common (estimate over COMMON) is not probed: its bitmap
    would list most of the table before the first FEW+1 rows come back."""
    estimate = words.estimate if words.estimate is not None else estimated_rows(db, words)
    if estimate > limits.COMMON:
        return None
    params: list[object] = []
    sql = limits.PROBE_SQL.format(matching=words.matching(params))
    with _index_only(db):
        rows = db.execute(sql, params).fetchall()
    return [int(row[0]) for row in rows]


def estimated_rows(db: DB, words: Words) -> float:
    """The planner's estimate of the messages matching `words` (planning only, no scan)."""
    params: list[object] = []
    return _planned_rows(db, words.matching(params), params)


def _planned_rows(db: DB, matching: str, params: list[object]) -> float:
    """The planner's estimate of the messages meeting the condition `matching` on `m`."""
    row = db.execute(ESTIMATE_SQL.format(matching=matching), params).fetchone()
    assert row is not None
    return float(row[0][0]["Plan"]["Plan Rows"])


def driven(db: DB, tree: Node, tsquery: str, roles: Sequence[str]) -> Words:
    """The word query of `tree`, driven by the index the planner expects to read fewer rows
    from: the word index, or the pairs index when the tree's phrases narrow it (a phrase of two
    common words: its pairs are in a few thousand messages, its words together in 40,000) and
    the search leaves out tool output (which the pairs index does)."""
    words = Words(tsquery)
    by_words = estimated_rows(db, words)
    pairs = None if ddl.PAIRED_OUT in roles else compile_pairs(tree)
    if pairs is None:
        return Words(tsquery, None, by_words)
    by_pairs = _planned_rows(db, f"{ddl.pairs()} @@ %s::tsquery AND {ddl.paired()}", [pairs])
    # The word index reads every row holding the phrase's words, wherever they stand, and the
    # planner counts words as if they met by chance: 'again' & 'one' was estimated at 5,255 rows
    # and held 12,637 (390 ms to re-check). A pair outside the column's most common elements is
    # estimated as half the rarest of them (6,162 for 'again one', which is in 141 rows). So the
    # pairs drive unless the words are far more selective (`"in the" quokka`).
    read_by_words = estimated_rows(db, Words(tsquery.replace(" <-> ", " & ")))
    if by_pairs < limits.PAIRS_BIAS * read_by_words:
        return Words(tsquery, pairs, by_pairs)
    return Words(tsquery, None, by_words)


def reading(db: DB, words: Words, order: Order) -> tuple[Words, list[int] | None, list[int]]:
    """How a word query's matches are read: (the query, marked `at_once` or not; the few
    matches probed, or None; the id windows).

    A word query is probed for its few matches (`_few`). Past FEW, the probe's oldest matches
    tell how densely the word occurs, so how many matches it has in all (the planner's
    estimate is no bound for a prefix: 'prea':* was estimated at 13,497 rows and is in 83,679).
    Up to COMMON matches are read at once: in one bitmap of the index over every id, with the
    bounds checked on its rows, where each id window would read them all again and where the
    planner, expecting many in a window, walks the primary key and checks every row ('loxc*':
    4,492 matches, 41,000 rows checked in the 1/4 window, 140 ms; at once, 17 ms). A prefix is
    read at once up to AT_ONCE matches only, and its windows always as bitmaps: at once, every
    match is fetched to find the newest ('cruc*', 11,500 matches: 145-245 ms). More are
    read window by window. A query driven by pairs is not probed (the pairs index names a few
    thousand rows at most, which the probe would read twice): at once when the planner expects
    at most FEW_PAIRS of them, else window by window ('in the', 8,737 rows by its pairs)."""
    if words.pairs is not None:
        if words.estimate is not None and words.estimate <= limits.FEW_PAIRS:
            return replace(words, at_once=True), None, []
        return words, None, _windows(db, None, order)
    found = _few(db, words)
    if found is not None and len(found) <= limits.FEW:
        return words, found, []
    at_once = limits.AT_ONCE if words.prefix else limits.COMMON
    if found is not None and _spread(db, found) <= at_once:
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


Query = Callable[[int | None, int | None, int], tuple[str, list[object]]]


def direct_edge(db: DB, words: Words, order: Order) -> int | None:
    """The edge of the newest (for OLDEST, the oldest) DIRECT_IDS ids, which a prefix query
    reads first by walking the primary key; None for any other query, or a small id range.

    GIN answers a prefix by building the bitmap of every word it expands to, whichever ids are
    asked: 'prea':* (84,000 matches at 1.5M messages) took 35-70 ms per statement, and the probe
    and the first window each built it (p99 119 ms). Walking the newest ids, a dense prefix
    fills a batch within a few thousand rows. Only a prefix the planner expects more than COMMON
    matches of is read so: a sparse one would check DIRECT_IDS rows for a few matches first."""
    if words.pairs is not None or not words.prefix:
        return None
    if words.estimate is None or words.estimate <= limits.COMMON:
        return None
    ids = _id_range(db)
    if ids is None or ids[1] - ids[0] < limits.WINDOW_MIN_SPAN:
        return None
    low, high = ids
    return low + limits.DIRECT_IDS if order is Order.OLDEST else high - limits.DIRECT_IDS


class _Matches:
    """A word query's matches in id order, `rows(cursor, limit)` at a time: exactly what one
    query over every id returns. A prefix's `direct_edge` window is read first by walking the
    primary key; how the rest is read (`reading`: the probe, at once or window by window) is
    decided only once a read goes past it, so a dense prefix never builds its bitmap.
    `query_for(words, few)` makes the statement for one way of reading."""

    def __init__(
        self,
        db: DB,
        words: Words,
        order: Order,
        query_for: Callable[[Words, list[int] | None], Query],
    ) -> None:
        self._db = db
        self._words = words
        self._order = order
        self._query_for = query_for
        self._direct = direct_edge(db, words, order)
        self._planned: tuple[Words, list[int] | None, list[int]] | None = None

    def rows(self, cursor: int | None, limit: int) -> list[Any]:
        rows: list[Any] = []
        edge = self._direct
        if edge is not None and not _passed(self._order, cursor, edge):
            sql, params = self._query_for(self._words, None)(cursor, edge, limit)
            with _key_walk(self._db):
                rows = self._db.execute(sql, params).fetchall()
            if len(rows) >= limit:
                return rows
            cursor = _beyond(self._order, edge)
        if self._planned is None:
            self._planned = reading(self._db, self._words, self._order)
        words, few, edges = self._planned
        if few == []:
            return rows
        query = self._query_for(words, few)
        bitmap = words.phrase or words.at_once or words.prefix
        return rows + _walk(self._db, self._order, edges, cursor, limit - len(rows), query, bitmap)


def ordered_words(
    db: DB, words: Words, filters: Filters, order: Order, plain: bool
) -> Iterator[Hit]:
    def query_for(words: Words, few: list[int] | None) -> Query:
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

        return query

    matches = _Matches(db, words, order, query_for)
    cursor: int | None = None
    while True:
        rows = matches.rows(cursor, limits.BATCH)
        for row in rows:
            yield Hit(int(row[0]), str(row[1]), 0.0, "words")
        if len(rows) < limits.BATCH:
            return
        cursor = int(rows[-1][0])


def ranked_words(db: DB, words: Words, filters: Filters, plain: bool) -> Iterator[Hit]:
    """ts_rank order inside windows of the newest RANK_WINDOW matches, newest window first;
    the rank is computed on the window's rows only."""

    def query_for(words: Words, few: list[int] | None) -> Query:
        def query(past: int | None, edge: int | None, n: int) -> tuple[str, list[object]]:
            params: list[object] = [words.tsquery]
            matching = words.matching(params)
            inside = _within(few, params)
            bound = _past(Order.NEWEST, past, params, words.ids)
            bound += _edge(Order.NEWEST, edge, params, words.ids)
            join, where = _filter_sql(filters, params)
            return (
                f"SELECT w.id, w.session_id, ts_rank(w.search_words, %s::tsquery,"
                f" {limits.RANK_NORMALIZATION}) FROM (SELECT m.id, m.session_id, m.search_words"
                f" FROM messages AS m{join} WHERE {matching}{inside}{bound}"
                f"{where}{_plain(plain)} ORDER BY m.id DESC LIMIT {n}) AS w",
                params,
            )

        return query

    matches = _Matches(db, words, Order.NEWEST, query_for)
    upper: int | None = None
    for _ in range(limits.MAX_WINDOWS):
        rows = matches.rows(upper, limits.RANK_WINDOW)
        rows.sort(key=lambda r: (-float(r[2]), -int(r[0])))
        for row in rows:
            yield Hit(int(row[0]), str(row[1]), -float(row[2]), "words")
        if len(rows) < limits.RANK_WINDOW:
            return
        upper = min(int(r[0]) for r in rows)
