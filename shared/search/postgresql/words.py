"""Word queries on PostgreSQL: how one is read (`Words`; the probe for its few matches, the
planner's estimates, the pairs index or the word index to drive it, at once or window by window)
and its hits in id order (`ordered_words`) or ranked by ts_rank (`ranked_words`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from shared.search.backend import Filters, Hit, Order
from shared.search.postgresql import ddl, limits, prefixes
from shared.search.postgresql.compiler import compile_pairs, compile_words
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
from shared.search.postgresql.windows import serial as _serial
from shared.search.postgresql.windows import walk as _walk
from shared.search.postgresql.windows import windows as _windows
from shared.search.postgresql.windows import within_clause as _within
from shared.search.query import Node, Term

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
    # Driven by the prefix index (`prefixes`): the prefix's first PREFIX_CHARS characters, and
    # the id range whose buckets a read without bounds takes.
    start: str | None = None
    span: tuple[int, int] = (0, 0)

    def matching(
        self,
        params: list[object],
        order: Order = Order.NEWEST,
        past: int | None = None,
        edge: int | None = None,
    ) -> str:
        """The condition on `m` (its parameters appended); driven by the prefix index, on the
        window past `past` up to `edge` (the keys of its buckets: the bounds are checked too).
        The words are checked on each row the keys admit unless the prefix is the key itself
        (`'snoo':*`: a word matches it exactly when it starts with those characters)."""
        if self.start is not None:
            params.append(prefixes.keys(self.start, self.span, order, past, edge))
            keyed = f"{ddl.prefixes()} && %s::text[] AND {ddl.paired()}"
            if self.tsquery == compile_words(Term(self.start, prefix=True)):
                return keyed
            params.append(self.tsquery)
            return f"{keyed} AND (m.search_words @@ %s::tsquery) IS TRUE"
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
        return "(m.id + 0)" if self.at_once or self.start is not None else "m.id"

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
    start = prefixes.start_of(tree, roles)
    span = _id_range(db) if start is not None else None
    if start is not None and span is not None:
        return Words(tsquery, start=start, span=span)
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
    if by_pairs <= limits.FEW_PAIRS:
        # Every key outside the statistics is estimated alike: '"eswiexing code"' at 6,162
        # rows by its pair (11 rows) and 1,288 by its words (3,284 re-checked, 110-180 ms
        # driven by them); '"quiessooxs from"' the same 6,162 by a pair whose key it shares
        # with a common one (4,562 rows) and 620 by its words (872). So the pair is counted.
        counted = _counted(db, pairs)
        if counted is not None:
            if counted <= limits.COUNTED_BIAS * read_by_words:
                return Words(tsquery, pairs, float(counted))
            return Words(tsquery, None, by_words)
    if by_pairs < limits.PAIRS_BIAS * read_by_words:
        return Words(tsquery, pairs, by_pairs)
    return Words(tsquery, None, by_words)


COUNT_SQL = (
    "EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) SELECT 1 FROM messages AS m"
    f" WHERE {ddl.pairs()} @@ %s::tsquery AND {ddl.paired()} LIMIT 1"
)


def _counted(db: DB, pairs: str) -> int | None:
    """The rows of the pairs index holding `pairs` (a key outside the statistics: a few
    thousand at most), from the bitmap the index scan builds whole before the first row is
    fetched (about a millisecond; LIMIT 1 fetches one row). None: the plan read no bitmap."""
    with _index_only(db):
        row = db.execute(COUNT_SQL, [pairs]).fetchone()
    assert row is not None
    plans = [row[0][0]["Plan"]]
    while plans:
        plan = plans.pop()
        if plan["Node Type"] == "Bitmap Index Scan":
            return int(plan["Actual Rows"])
        plans.extend(plan.get("Plans", []))
    return None


def reading(
    db: DB, words: Words, order: Order, walked: tuple[float, int | None, int] | None = None
) -> tuple[Words, list[int] | None, list[int]]:
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
    at most FEW_PAIRS of them, else window by window ('in the', 8,737 rows by its pairs).
    `walked`: (matches per id, cursor, matches wanted) where a prefix's walk of the primary key
    stopped (`_Matches`); found in more than FEW messages at that density, it is not probed
    and its first window holds twice the wanted matches at that density, so one bitmap
    usually serves the read ('ieth':*, 7,000 matches: 52 in the newest 1/64 window; the 1/16
    and 1/4 windows each built its bitmap again)."""
    if words.pairs is not None:
        if words.estimate is not None and words.estimate <= limits.FEW_PAIRS:
            return replace(words, at_once=True), None, []
        return words, None, _windows(db, None, order)
    if walked is not None:
        sized = _sized(db, order, *walked)
        if sized is not None:
            return words, None, sized
    found = _few(db, words)
    if found is not None and len(found) <= limits.FEW:
        return words, found, []
    at_once = limits.AT_ONCE if words.prefix else limits.COMMON
    if found is not None and _spread(db, found) <= at_once:
        return replace(words, at_once=True), None, []
    return words, None, _windows(db, None, order)


def _sized(
    db: DB, order: Order, density: float, cursor: int | None, wanted: int
) -> list[int] | None:
    """The windows past `cursor` of a prefix found at `density` (matches per id) by its walk:
    the first sized for twice `wanted` matches, then those of `windows` beyond it; None when
    at that density the prefix has at most FEW matches (the probe lists them)."""
    ids = _id_range(db)
    if ids is None or cursor is None or density * (ids[1] - ids[0] + 1) <= limits.FEW:
        return None
    first = _toward(order, cursor, 2 * wanted / density)
    if not ids[0] < first < ids[1]:
        return []
    oldest = order is Order.OLDEST
    later = [e for e in _windows(db, None, order) if (e > first if oldest else e < first)]
    return [first, *later]


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
    reads first by walking the primary key (`_Matches` walks on while that is cheaper than the
    word index); None for any other query, or a small id range.

    GIN answers a prefix by building the bitmap of every word it expands to, whichever ids are
    asked, about 2 us a match on a busy 2-core machine: 'snoo':* (69,000 matches at 1.5M
    messages) took 145 ms per statement, and the probe and the first window each built it.
    Walking the newest ids, a dense prefix fills a window within a few thousand rows. Only a
    prefix the planner expects in more than WALK_OVER messages is read so: a sparse one would
    check DIRECT_IDS rows for a few matches first. (The estimate is low for a prefix, 5,757 for
    each of 'ieth':* to 'troo':*, 7,000 to 65,000 matches, so only the sparsest are left out.)"""
    if words.pairs is not None or not words.prefix:
        return None
    if words.estimate is None or words.estimate <= limits.WALK_OVER:
        return None
    ids = _id_range(db)
    if ids is None or ids[1] - ids[0] < limits.WINDOW_MIN_SPAN:
        return None
    low, high = ids
    return low + limits.DIRECT_IDS if order is Order.OLDEST else high - limits.DIRECT_IDS


def _toward(order: Order, edge: int, ids: float) -> int:
    """`ids` past `edge`, the way a walk in `order` goes."""
    step = max(int(ids), 1)
    return edge + step if order is Order.OLDEST else edge - step


class _Matches:
    """A word query's matches in id order, `rows(cursor, limit)` at a time: exactly what one
    query over every id returns. A prefix's `direct_edge` window is read first by walking the
    primary key; when it is used up short of a window, the walk goes on as far as the density
    of the matches it found says the rest lies (twice that), while walking those ids is expected
    to cost less than GIN's bitmap of all the prefix's matches (WALK_COST rows walked for one
    match listed: its matches in the whole id range, at that density). How the rest is read
    (`reading`: the probe, at once or window by window) is decided only once a read goes past
    the walk, so a dense prefix never builds its bitmap; a prefix the walk found dense is not
    probed (its probe would build the bitmap once more) and its first window is sized to hold
    the rest of the read at that density. `query_for(words, few)` makes the statement for one
    way of reading."""

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
        self._walking = self._direct is not None
        self._walked = 0  # matches the walk has returned, all of them up to its edge
        self._density: float | None = None  # matches per id where the walk stopped
        self._planned: tuple[Words, list[int] | None, list[int]] | None = None

    def _direct_rows(self, cursor: int | None, limit: int) -> tuple[list[Any], int | None, bool]:
        """The walk's rows past `cursor`: (rows, the cursor to go on from, whether the walk
        has read every match: it went on to the end of the id range)."""
        rows: list[Any] = []
        while self._walking and not _passed(self._order, cursor, self._direct):
            edge = self._direct  # None: on to the end of the id range
            sql, params = self._query_for(self._words, None)(cursor, edge, limit - len(rows))
            with _key_walk(self._db):
                got = self._db.execute(sql, params).fetchall()
            rows += got
            self._walked += len(got)
            if len(rows) >= limit:
                break
            if edge is None:
                return rows, cursor, True
            cursor = _beyond(self._order, edge)
            self._walking, self._direct = self._further(edge, limit - len(rows))
        return rows, cursor, False

    def _further(self, edge: int, wanted: int) -> tuple[bool, int | None]:
        """Whether the walk goes on past `edge` for `wanted` more matches, and to where (None:
        to the end of the id range); when it stops, the rest is read from the word index."""
        ids = _id_range(self._db)
        if ids is None or self._walked == 0:
            return False, None
        low, high = ids
        start = low if self._order is Order.OLDEST else high
        density = self._walked / max(abs(edge - start), 1)
        self._density = density
        walk = wanted / density
        if walk * limits.WALK_COST > density * (high - low + 1):
            return False, None
        further = _toward(self._order, edge, 2 * walk)
        return True, further if low < further < high else None

    def _keyed_rows(self, cursor: int | None, limit: int) -> list[Any]:
        """The rows past `cursor` through the prefix index, window by window (`prefixes`), each
        read as a bitmap of its buckets' keys: exactly what one query over every id returns."""
        query = self._query_for(self._words, None)
        span, order, began = self._words.span, self._order, cursor
        edge = prefixes.first_edge(span, order, cursor)
        rows: list[Any] = []
        while True:
            sql, params = query(cursor, edge, limit - len(rows))
            with _index_only(self._db):
                rows += self._db.execute(sql, params).fetchall()
            if len(rows) >= limit or edge is None:
                return rows
            cursor = _beyond(order, edge)
            edge = prefixes.next_edge(span, order, began, edge, len(rows), limit)

    def rows(self, cursor: int | None, limit: int) -> list[Any]:
        if self._words.start is not None:
            with _serial(self._db):
                return self._keyed_rows(cursor, limit)
        rows, cursor, every = self._direct_rows(cursor, limit)
        if len(rows) >= limit or every:
            return rows
        if self._planned is None:
            dense = None if self._density is None else (self._density, cursor, limit - len(rows))
            self._planned = reading(self._db, self._words, self._order, dense)
        words, few, edges = self._planned
        if few == []:
            return rows
        query = self._query_for(words, few)
        bitmap = words.phrase or words.at_once or words.prefix
        return rows + _walk(self._db, self._order, edges, cursor, limit - len(rows), query, bitmap)


def _rows(
    words: Words,
    filters: Filters,
    order: Order,
    window: tuple[int | None, int | None],
    few: list[int] | None,
    plain: bool,
    params: list[object],
) -> str:
    """` FROM ... WHERE ...` of the matches in the window past its cursor up to its edge
    (`window`), for `ordered_words` and `ranked_words` (parameters appended). The filters come
    before the words: PostgreSQL checks conditions of equal cost in the order written, and on a
    walk of the primary key the role is then checked before the words, whose tsvector a tool
    message keeps out of line (8,014 buffers instead of 13,767 for 'prai':* in its newest ids).

    Driven by the prefix index, the window's rows are a subquery the filters stay out of
    (OFFSET 0): the planner estimates the keys of 16 buckets at 95,000 rows where they hold a
    few hundred, and would AND the role's bitmap over every message with them (1.2M rows of
    `ix_messages_session_role`, 740 ms at 1.5M messages) instead of checking the rows."""
    past, edge = window
    if words.start is not None:
        keyed = words.matching(params, order, past, edge)
        bound = _past(order, past, params, words.ids) + _edge(order, edge, params, words.ids)
        join, where = _filter_sql(filters, params)
        return (
            f" FROM (SELECT * FROM messages AS m WHERE {keyed}{bound} OFFSET 0) AS m{join}"
            f" WHERE TRUE{where}{_plain(plain)}"
        )
    join, where = _filter_sql(filters, params)
    matching = words.matching(params)
    inside = _within(few, params)
    bound = _past(order, past, params, words.ids) + _edge(order, edge, params, words.ids)
    return (
        f" FROM messages AS m{join} WHERE TRUE{where} AND {matching}{inside}{bound}{_plain(plain)}"
    )


def ordered_words(
    db: DB, words: Words, filters: Filters, order: Order, plain: bool
) -> Iterator[Hit]:
    """Matches in id order (statements: `_rows`)."""

    def query_for(words: Words, few: list[int] | None) -> Query:
        def query(past: int | None, edge: int | None, n: int) -> tuple[str, list[object]]:
            params: list[object] = []
            rows = _rows(words, filters, order, (past, edge), few, plain, params)
            return (
                f"SELECT m.id, m.session_id{rows} ORDER BY m.id {_direction(order)} LIMIT {n}",
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
            rows = _rows(words, filters, Order.NEWEST, (past, edge), few, plain, params)
            return (
                f"SELECT w.id, w.session_id, ts_rank(w.search_words, %s::tsquery,"
                f" {limits.RANK_NORMALIZATION}) FROM (SELECT m.id, m.session_id, m.search_words"
                f"{rows} ORDER BY m.id DESC LIMIT {n}) AS w",
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
