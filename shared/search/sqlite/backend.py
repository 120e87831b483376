"""SQLite search backend: matching messages in a bounded way, and the rows results are built of.

Two indexes (DDL in `ddl`): words in `messages_fts` (unicode61) and substrings of
messages in unsegmented scripts in `messages_cjk` (trigram). A query without Han, kana, Thai...
goes to the word index; one whose every match must hold such a term (`中文`, `deploy 中文`)
to the trigram index; each option of a top-level OR is routed on its own and the streams
merged. A query where such terms may be absent from a match (`deploy NOT 中文`,
`deploy (中文 OR release)`) runs twice, split by message: the messages in the trigram index get
the whole query there, the others (which hold no such text) the query with those terms taken
as absent (`deploy`) on the word index (`_Routes`). The trigram index keeps no positions, so it
only narrows the rows down; the text is checked with `instr` before a row counts
(`_verified`), which keeps substring search exact.

Bounded work at any size:
- `newest`/`oldest` walk the index in rowid order (FTS5 does this without ranking anything)
  and stop as soon as the caller has enough sessions.
- relevance ranks with bm25 inside windows of the newest RANK_WINDOW matches, newest window
  first. A term with fewer matches than a window is ranked exactly; a common one (bm25 over
  every match takes seconds at 1.5M messages) is ranked among its most recent matches.
- a term of 1-2 characters cannot be trigram-searched directly; it is expanded through the
  index vocabulary into the trigrams it begins (`中文` → `"中文的" OR "中文是" OR ...`). A long
  list means a common term: then the newest SCAN_ROWS trigram-indexed messages are checked
  directly first (instr), which finds a common term at once, and only if that is not enough
  does the full expansion run.

Measured at 1.5M messages (bench/search.py, on a 2-core machine) and set aside:
- `ORDER BY rank` over every match: 1.0-1.2 s for "the", 0.26 s for "with". Even bm25 over a
  window of 10 rows costs 14-70 ms for "the": FTS5's bm25 counts every row holding each phrase
  once per query. Hence `_scoring`: a term in more than MAX_SCORED_DF messages is not weighed (its
  idf is low, and counting it costs more than the whole budget).
- a direct scan for a 2-character CJK term: 0.19-0.23 s over the ~100k CJK messages, 0.3-1.2 s
  as LIKE over all messages (what the competing system does); the vocabulary expansion answers
  it in ~3 ms (p99 under 10 ms of CPU).
- (considered, not built) an app-defined function in the triggers feeding a character-split
  unicode61 table: every connection that writes messages, the sqlite3 shell included, would
  need the function registered or fail to write.
- a prefix index (`prefix='4'`) on messages_fts: a broad 4-letter prefix (1,100 words) drops
  from ~45 ms to <1 ms, for +45% word-index size and only that prefix length; not taken here
  (messages_fts is revision 0001's), noted for whoever tunes it.

The rows results are built of (windows, bookends, sessions) come from `rows`;
this module re-exports them so that it is the whole backend (`shared.search.backend`).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from shared.search.backend import Filters, Hit, Order
from shared.search.query import All, Node, Query, QueryError, Term
from shared.search.routing import merge as _merge
from shared.search.routing import routes as _routes
from shared.search.sqlite.compiler import (
    ANY_ROW,
    TRIGRAM,
    Expander,
    compile_substrings,
    compile_words,
    fold,
    predicate,
    quote,
)
from shared.search.sqlite.rows import around as around
from shared.search.sqlite.rows import count_between as count_between
from shared.search.sqlite.rows import db_of as _db
from shared.search.sqlite.rows import ends as ends
from shared.search.sqlite.rows import filter_sql as _filter_sql
from shared.search.sqlite.rows import first_text as first_text
from shared.search.sqlite.rows import marks as _marks
from shared.search.sqlite.rows import message as message
from shared.search.sqlite.rows import parents as parents
from shared.search.sqlite.rows import recent_sessions as recent_sessions
from shared.search.sqlite.rows import sessions_by_id as sessions_by_id
from shared.search.views import ELLIPSIS, MARK_CLOSE, MARK_OPEN

RANK_WINDOW = 256  # matches ranked by bm25 at a time
MAX_SCORED_DF = 100_000  # terms matching more messages than this are not weighed by bm25
MAX_WINDOWS = 40  # relevance looks at most at this many windows (~10,000 matches)
BATCH = 64  # hits fetched at a time in rowid order
MAX_EXPANSION = 600  # trigrams a short term may expand to before the direct check runs first
SCAN_ROWS = 2000  # newest trigram-indexed messages checked directly for a common short term
SCAN_CHUNK = 500
SNIPPET_TOKENS = 16
LOOKUP = 8  # best rows of a window whose messages are looked up first
# A phrase with a word in at most TRIAL_DF messages mostly fits one window: tried as one, oldest
# first (1.5 ms against 2.1 newest first, median bench phrase at 1.5M); one that does not pays
# the walk on top. Bench phrases that filled a window had every word in >24k; ANDs: 36 of 37 not.
TRIAL_DF = 20_000

WORDS, SUBSTRINGS = "messages_fts", "messages_cjk"
KIND = {WORDS: "words", SUBSTRINGS: "substrings"}
WORD = re.compile(r"\w+")


def _past(order: Order, cursor: int | None, column: str, params: list[object]) -> str:
    if cursor is None:
        return ""
    params.append(cursor)
    return f" AND {column} {'>' if order is Order.OLDEST else '<'} ?"


def _verified(tree: Node | None, params: list[object]) -> str:
    """The exact condition for a trigram-index match (the index itself over-matches)."""
    return "" if tree is None else " AND " + predicate(tree, params)


def _plain(only: bool, column: str = "m.id") -> str:
    """Keep only messages outside the trigram index (no unsegmented text), when `only`."""
    if not only:
        return ""
    return f" AND NOT EXISTS (SELECT 1 FROM messages_cjk_docsize AS c WHERE c.id = {column})"


def _direction(order: Order) -> str:
    return "ASC" if order is Order.OLDEST else "DESC"


def _ordered(
    db: sqlite3.Connection,
    table: str,
    expr: str,
    filters: Filters,
    order: Order,
    cursor: int | None = None,
    verify: Node | None = None,
    plain: bool = False,
) -> Iterator[Hit]:
    """Matches in rowid order (past `cursor`), filtered, a batch at a time."""
    while True:
        params: list[object] = [expr]
        bound = _past(order, cursor, "f.rowid", params)
        join, where = _filter_sql(filters, params)
        where += _verified(verify, params) + _plain(plain)
        rows = db.execute(
            f"SELECT f.rowid, m.session_id FROM {table} AS f JOIN messages AS m ON m.id = f.rowid"
            f"{join} WHERE {table} MATCH ?{bound}{where}"
            f" ORDER BY f.rowid {_direction(order)} LIMIT {BATCH}",
            params,
        ).fetchall()
        for row in rows:
            yield Hit(int(row[0]), str(row[1]), 0.0, KIND[table])
        if len(rows) < BATCH:
            return
        cursor = int(rows[-1][0])


def _df_estimate(db: sqlite3.Connection, table: str, expr: str, top: int | None) -> tuple[int, int]:
    """(How many messages match `expr`, from how far back its newest RANK_WINDOW matches go;
    the highest message id `top`, read in the same statement when not known yet)."""
    ceiling = ", (SELECT coalesce(max(id), 0) FROM messages)" if top is None else ""
    row = db.execute(
        f"SELECT count(*), min(rowid), max(rowid){ceiling} FROM (SELECT rowid FROM {table}"
        f" WHERE {table} MATCH ? ORDER BY rowid DESC LIMIT {RANK_WINDOW})",
        (expr,),
    ).fetchone()
    top = int(row[3]) if top is None else top
    return _from_span(int(row[0]), row[1], row[2], top), top


def _from_span(found: int, oldest: int | None, newest: int | None, top: int) -> int:
    if found < RANK_WINDOW or oldest is None or newest is None:
        return found
    span = max(1, newest - oldest)
    return RANK_WINDOW * max(top, span) // span


@dataclass(frozen=True, slots=True)
class Weighed:
    """A term bm25 may weigh: its expression, whether it must match (not under NOT), and the
    expressions whose match counts say what weighing it costs (a phrase: each of its words)."""

    expr: str
    positive: bool
    probes: tuple[str, ...]
    required: bool = False  # every match holds it (a term of the top-level AND)


def _scoring(
    db: sqlite3.Connection, table: str, expr: str, terms: Sequence[Weighed]
) -> tuple[str | None, int | None]:
    """(The expression to rank with, the fewest messages a probe of a term every match holds
    found: a bound on the matches, None when no such probe ran). The expression is `expr`
    itself when every term may be weighed, else the OR of the positive terms that may (None:
    none may, rank newest first). Under RANK_WINDOW, the probe counted them all: all matches
    fit in one window.

    FTS5's bm25 counts each phrase's matching rows over the whole index once per query, which
    costs about as much as walking the doclists of the phrase's words; a word in a large share
    of all messages makes that tens of ms, and its idf is low anyway."""
    cap = MAX_SCORED_DF
    top: int | None = None  # the highest message id, read with the first probe
    known: dict[str, int] = {}

    def cheap(term: Weighed) -> bool:
        """Whether some word of the term is in at most `cap` messages (then the phrase is
        counted along that word's doclist); stops probing at the first such word."""
        nonlocal top
        for probe in term.probes:
            if probe not in known:
                known[probe], top = _df_estimate(db, table, probe, top)
            if known[probe] <= cap:
                return True
        return False

    kept = [term for term in terms if cheap(term)]
    least = min(
        (
            known[probe]
            for term in terms
            if term.required
            for probe in term.probes
            if probe in known
        ),
        default=None,
    )
    if terms and len(kept) == len(terms):
        return expr, least
    positive = [term.expr for term in kept if term.positive]
    return ("(" + " OR ".join(positive) + ")" if positive else None), least


def _ranked(
    db: sqlite3.Connection,
    table: str,
    expr: str,
    terms: Sequence[Weighed],
    filters: Filters,
    verify: Node | None = None,
    plain: bool = False,
    alone: bool = False,
) -> Iterator[Hit]:
    """bm25 order inside windows of the newest RANK_WINDOW matches, newest window first.

    FTS5 walks the index newest first and the LIMIT stops it; bm25 runs only on the rows of the
    window (see `_scoring` for which terms it weighs). A query of one word is not probed
    separately: its first window tells how common it is. The window is read from the index
    alone; the messages behind it (session, role, filters) are looked up best first, a few at a
    time (`_kept`), as the caller takes hits: joining every match of the window to its message
    cost 1-3 ms a window at 1.5M messages, and a search mostly needs the best few.

    `alone`: these hits are the whole answer (no other stream is merged with them by score),
    so a window of one match needs no score and bm25 is not run for it (Hit.score stays 0.0;
    it only orders). At 1.5M messages most rare words are in one message, and weighing that
    one was a second FTS5 statement (~0.1 ms of a ~0.4 ms call)."""
    lone = len(terms) == 1 and terms[0].probes == (expr,)
    scoring, least = (None, None) if lone else _scoring(db, table, expr, terms)
    fits = least is not None and least < RANK_WINDOW
    weigh = scoring == expr and not lone and not (alone and least is not None and least <= 1)
    score = f"bm25({table})" if weigh else "0.0"
    first: list[Any] | None = None
    phrase = len(terms) == 1 and len(terms[0].probes) > 1
    if phrase and not fits and scoring == expr and least is not None and least <= TRIAL_DF:
        # Likely all in one window (TRIAL_DF): walked oldest first, one row past it tells
        sql = _window_sql(table, score, "", plain, False, "", RANK_WINDOW + 1)
        first = db.execute(sql, (expr,)).fetchall()
        fits = len(first) <= RANK_WINDOW
    # All in one window: walked oldest first, which FTS5 does faster (0.5-1 ms on a phrase)
    direction = "" if fits else " DESC"
    upper: int | None = None
    for window in range(MAX_WINDOWS):
        if window == 0 and fits and first is not None:
            rows = first
        else:
            params: list[object] = [expr]
            bound = _past(Order.NEWEST, upper, "f.rowid", params)
            ceiling = lone and window == 0
            sql = _window_sql(table, score, bound, plain, ceiling, direction, RANK_WINDOW)
            rows = db.execute(sql, params).fetchall()
        if fits:
            rows.reverse()
        if lone and window == 0:
            top = int(rows[0][2]) if rows else 0
            oldest, newest = (int(rows[-1][0]), int(rows[0][0])) if rows else (None, None)
            common = _from_span(len(rows), oldest, newest, top) > MAX_SCORED_DF
            scoring = None if common else expr
        scores = {int(r[0]): float(r[1]) for r in rows}
        unweighed = alone and len(rows) <= 1
        if rows and scoring is not None and (lone or scoring != expr) and not unweighed:
            scores.update(_scores(db, table, scoring, int(rows[-1][0]), int(rows[0][0]), scores))
        best = sorted(scores, key=lambda rowid: (scores[rowid], -rowid))
        yield from _kept(db, table, best, scores, filters, verify)
        if len(rows) < RANK_WINDOW:
            return
        upper = int(rows[-1][0])


def _window_sql(
    table: str, score: str, bound: str, plain: bool, ceiling: bool, direction: str, limit: int
) -> str:
    """A window of `_ranked`: rowids (and `score`) of the matches in rowid order."""
    top = ", (SELECT coalesce(max(id), 0) FROM messages)" if ceiling else ""
    return (
        f"SELECT f.rowid, {score}{top} FROM {table} AS f WHERE {table} MATCH ?{bound}"
        f"{_plain(plain, 'f.rowid')} ORDER BY f.rowid{direction} LIMIT {limit}"
    )


def _kept(
    db: sqlite3.Connection,
    table: str,
    best: Sequence[int],
    scores: dict[int, float],
    filters: Filters,
    verify: Node | None,
) -> Iterator[Hit]:
    """The hits among `best` (rowids, best first) whose messages pass the filters, in that
    order, looked up LOOKUP rows at first, twice as many each time after (a search mostly
    stops within the first few)."""
    low, size = 0, LOOKUP
    while low < len(best):
        chunk = best[low : low + size]
        low, size = low + size, size * 2
        params: list[object] = [*chunk]
        join, where = _filter_sql(filters, params)
        where += _verified(verify, params)
        sessions = dict(
            db.execute(
                f"SELECT m.id, m.session_id FROM messages AS m{join}"
                f" WHERE m.id IN ({_marks(chunk)}){where}",
                params,
            ).fetchall()
        )
        for rowid in chunk:
            if rowid in sessions:
                yield Hit(rowid, str(sessions[rowid]), scores[rowid], KIND[table])


def _scores(
    db: sqlite3.Connection, table: str, expr: str, low: int, high: int, wanted: dict[int, float]
) -> dict[int, float]:
    rows = db.execute(
        f"SELECT rowid, bm25({table}) FROM {table} WHERE {table} MATCH ? AND rowid BETWEEN ? AND ?",
        (expr, low, high),
    )
    return {int(r[0]): float(r[1]) for r in rows if int(r[0]) in wanted}


def _scanned(
    db: sqlite3.Connection, tree: Node, filters: Filters, order: Order
) -> Iterator[Hit | int]:
    """Check the newest (oldest) trigram-indexed messages directly; hits, then the cursor."""
    cursor: int | None = None
    seen = 0
    while seen < SCAN_ROWS:
        params: list[object] = []
        bound = _past(order, cursor, "id", params)
        chunk = db.execute(
            f"SELECT id FROM messages_cjk_docsize WHERE 1{bound}"
            f" ORDER BY id {_direction(order)} LIMIT {SCAN_CHUNK}",
            params,
        ).fetchall()
        if not chunk:
            return
        seen += len(chunk)
        ids = [int(row[0]) for row in chunk]
        params = [min(ids), max(ids)]
        condition = predicate(tree, params)
        join, where = _filter_sql(filters, params)
        rows = db.execute(
            "SELECT m.id, m.session_id FROM messages_cjk_docsize AS d"
            f" JOIN messages AS m ON m.id = d.id{join}"
            f" WHERE d.id BETWEEN ? AND ? AND {condition}{where} ORDER BY m.id {_direction(order)}",
            params,
        ).fetchall()
        for row in rows:
            yield Hit(int(row[0]), str(row[1]), 0.0, "substrings")
        cursor = ids[-1]
        if len(chunk) < SCAN_CHUNK:
            return
    if cursor is not None:
        yield cursor


def _substring_hits(
    db: sqlite3.Connection, tree: Node, filters: Filters, order: Order, alone: bool = False
) -> Iterator[Hit]:
    expander = Expander(db, MAX_EXPANSION)
    expr = compile_substrings(tree, expander)
    if expander.overflowed:
        # A common short term beside rarer ones (`我 配置 鹓鶵鸑鷟`): the others choose the rows.
        expander = Expander(db, MAX_EXPANSION, unbounded=True)
        narrowed = compile_substrings(tree, expander)
        if narrowed != ANY_ROW:
            expr = narrowed
            expander.overflowed = False
    if not expander.overflowed:
        if expr is None:
            return
        if order is Order.RELEVANCE:
            weights = _substring_weights(tree, expander)
            yield from _ranked(db, SUBSTRINGS, expr, weights, filters, verify=tree, alone=alone)
        else:
            yield from _ordered(db, SUBSTRINGS, expr, filters, order, verify=tree)
        return
    # A common short term: check recent messages directly, then the rest through the index.
    scan_order = Order.OLDEST if order is Order.OLDEST else Order.NEWEST
    rest_from: int | None = None
    for item in _scanned(db, tree, filters, scan_order):
        if isinstance(item, Hit):
            yield item
        else:
            rest_from = item
    full = compile_substrings(tree, Expander(db, None)) if rest_from is not None else None
    if full is not None:
        yield from _ordered(db, SUBSTRINGS, full, filters, scan_order, rest_from, verify=tree)


def _substring_weights(tree: Node, expander: Expander) -> list[Weighed]:
    """Terms of 3+ characters; an expanded short term is not weighed (its trigrams' idf says
    nothing about the term), which leaves a short-term query ranked newest first."""
    out = []
    for term, positive in Query(tree).polarized():
        if len(fold(term.text)) >= TRIGRAM:
            expr = compile_substrings(term, expander)
            if expr is not None:
                out.append(Weighed(expr, positive, (expr,)))
        elif positive:
            return []
    return out


def _word_weights(tree: Node) -> list[Weighed]:
    out = []
    required = _required(tree)
    for term, positive in Query(tree).polarized():
        words = WORD.findall(term.text)
        probes = [quote(w) for w in words]
        if term.prefix and probes:
            probes[-1] += "*"
        out.append(Weighed(compile_words(term), positive, tuple(probes), term in required))
    return out


def _required(node: Node) -> set[Term]:
    """The terms every match of `node` holds: itself, or what its AND requires."""
    if isinstance(node, Term):
        return {node}
    if isinstance(node, All):
        return set().union(*(_required(child) for child in node.must))
    return set()


def hits(conn: Connection, query: Query, filters: Filters, order: Order) -> Iterator[Hit]:
    """Matching messages, best first for the order, each once; lazy, so callers stop early."""
    db = _db(conn)
    routes = _routes(query)
    trees = (routes.words, routes.plain_words, routes.substrings)
    alone = sum(tree is not None for tree in trees) == 1  # no merge by score: `_ranked`
    streams: list[Iterator[Hit]] = []
    for word_tree, plain in ((routes.words, False), (routes.plain_words, True)):
        if word_tree is None:
            continue
        expr = compile_words(word_tree)
        if order is Order.RELEVANCE:
            weights = _word_weights(word_tree)
            streams.append(_ranked(db, WORDS, expr, weights, filters, plain=plain, alone=alone))
        else:
            streams.append(_ordered(db, WORDS, expr, filters, order, plain=plain))
    if routes.substrings is not None:
        streams.append(_substring_hits(db, routes.substrings, filters, order, alone))
    seen: set[int] = set()
    try:
        for hit in _merge(streams, order):
            if hit.message_id not in seen:
                seen.add(hit.message_id)
                yield hit
    except sqlite3.OperationalError as exc:
        if "fts5" not in str(exc).lower():
            raise
        raise QueryError(f"the full-text index rejected it ({exc})") from None


def snippets(conn: Connection, query: Query, found: Sequence[Hit]) -> dict[int, str]:
    """FTS5's own snippets for word-index hits. Left to the engine: substring hits (a trigram
    snippet marks whole trigrams) and prefix queries (each snippet would expand the prefix
    again, tens of ms for a broad one)."""
    word_tree = _routes(query).word_tree
    ids = [hit.message_id for hit in found if hit.index == "words"]
    if word_tree is None or not ids or any(t.prefix for t in Query(word_tree).terms()):
        return {}
    rows = _db(conn).execute(
        f"SELECT rowid, snippet({WORDS}, 0, ?, ?, ?, ?) FROM {WORDS}"
        f" WHERE {WORDS} MATCH ? AND rowid IN ({_marks(ids)})",
        (MARK_OPEN, MARK_CLOSE, ELLIPSIS, SNIPPET_TOKENS, compile_words(word_tree), *ids),
    )
    return {int(row[0]): str(row[1]) for row in rows if row[1] is not None}
