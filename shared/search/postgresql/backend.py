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
  (`windows.walk`), stopping once a batch is full, so the planner reads one window's matches rather
  than all of them (or the primary key down to the oldest); a phrase is read as a bitmap
  in each window, never by walking the primary key. The hits are those of one query.
- a phrase also narrows through the index of adjacent word pairs (`ddl.pairs`,
  `compile_pairs`): the rows re-read to check positions are those holding its pairs, not every
  row holding its words.
- a prefix of four characters or more (`snoo*`) is read through the index of words' first four
  characters by id bucket (`ddl.prefixes`, `prefixes`): its newest buckets first, never GIN's
  bitmap of every word it expands to over every id.

This module answers a query by merging its streams (`hits`); word queries are `words`,
substring queries `substrings`, the clauses and id windows they share `windows`, and the
sizes and thresholds above (FEW, RANK_WINDOW, ...) `limits`, where tests tune them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from sqlalchemy import Connection

from shared.search.backend import Filters, Hit, Order
from shared.search.postgresql.compiler import compile_words
from shared.search.postgresql.limits import PROBE_SQL as PROBE_SQL
from shared.search.postgresql.rows import around as around
from shared.search.postgresql.rows import count_between as count_between
from shared.search.postgresql.rows import db_of as _db
from shared.search.postgresql.rows import ends as ends
from shared.search.postgresql.rows import first_text as first_text
from shared.search.postgresql.rows import message as message
from shared.search.postgresql.rows import parents as parents
from shared.search.postgresql.rows import recent_sessions as recent_sessions
from shared.search.postgresql.rows import sessions_by_id as sessions_by_id
from shared.search.postgresql.substrings import substring_hits as _substring_hits
from shared.search.postgresql.windows import without_jit as _without_jit
from shared.search.postgresql.words import Words as Words
from shared.search.postgresql.words import driven as _driven
from shared.search.postgresql.words import ordered_words as _ordered_words
from shared.search.postgresql.words import ranked_words as _ranked_words
from shared.search.query import Query
from shared.search.routing import merge, routes


def hits(conn: Connection, query: Query, filters: Filters, order: Order) -> Iterator[Hit]:
    """Matching messages, best first for the order, each once; lazy, so callers stop early."""
    db = _db(conn)
    _without_jit(db)
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
