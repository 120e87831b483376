"""Prefix queries on PostgreSQL through the prefix index (`ddl.prefixes`, revision 0022): which
queries it drives (`start_of`), the id windows it reads them in (`first_edge`, `next_edge`: whole
buckets, sized by the density found) and the keys of one window (`keys`).

GIN answers `'snoo':*` from the word index by building the bitmap of every word the prefix
expands to, over every id, for each statement: 35-145 ms for a prefix in 0.3-5% of 1.5M
messages, where the newest few hundred matches are wanted. The prefix index keys each word by
its first PREFIX_CHARS characters and its message's id bucket (8,192 ids), so a window of the
newest ids reads the entries of its buckets only: a few hundred rows for a dense prefix.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from shared.search.backend import Order
from shared.search.postgresql import ddl, limits
from shared.search.postgresql.compiler import words_of
from shared.search.query import Node, Term


def start_of(tree: Node, roles: Sequence[str]) -> str | None:
    """The first PREFIX_CHARS characters of a query that is one word typed as a prefix
    (`snoo*`, `snoopy*`) of at least that many characters, when the search leaves out tool
    output (as the index does); None for any other query, read through the word index."""
    if ddl.PAIRED_OUT in roles or not isinstance(tree, Term) or not tree.prefix:
        return None
    words = words_of(tree.text)
    if len(words) != 1 or len(words[0]) < ddl.PREFIX_CHARS:
        return None
    return words[0][: ddl.PREFIX_CHARS]


def first_edge(span: tuple[int, int], order: Order, cursor: int | None) -> int | None:
    """The edge of the first window past `cursor` (None: from the end `order` starts at): the
    rest of the bucket holding the next id (as `windows.walk`'s edges; None: to the end of
    the id range `span`)."""
    low, high = span
    bits = ddl.BUCKET_BITS
    if order is Order.OLDEST:
        edge = (((low if cursor is None else cursor + 1) >> bits) + 1) << bits
        return edge if edge <= high else None
    edge = ((high if cursor is None else cursor - 1) >> bits) << bits
    return edge if edge > low else None


def next_edge(
    span: tuple[int, int], order: Order, began: int | None, edge: int, found: int, wanted: int
) -> int | None:
    """The edge of the window after the one ending at `edge`, when the read that began past
    `began` found `found` of its `wanted` matches up to there: whole buckets enough for the rest
    at the density found (PREFIX_AHEAD times, so one more window usually serves), at most
    PREFIX_GROWTH times the ids read so far (every one of them when none matched yet)."""
    low, high = span
    size = 1 << ddl.BUCKET_BITS
    if order is Order.OLDEST:
        read = edge - (low if began is None else began + 1)
    else:
        read = (high + 1 if began is None else began) - edge
    ids: float = limits.PREFIX_GROWTH * max(read, 1)
    if found:
        ids = min(ids, limits.PREFIX_AHEAD * (wanted - found) * read / found)
    buckets = max(1, math.ceil(ids / size))
    if order is Order.OLDEST:
        after = edge + buckets * size
        return after if after <= high else None
    after = edge - buckets * size
    return after if after > low else None


def keys(
    start: str, span: tuple[int, int], order: Order, past: int | None, edge: int | None
) -> list[str]:
    """The prefix index's keys of `start` for the window past `past` (the cursor) up to `edge`
    (as `windows.walk` asks them), within the id range `span`."""
    low, high = span
    if order is Order.OLDEST:
        first = low if past is None else max(low, past + 1)
        last = high if edge is None else min(high, edge - 1)
    else:
        first = low if edge is None else max(low, edge)
        last = high if past is None else min(high, past - 1)
    bits = ddl.BUCKET_BITS
    return [ddl.prefix_key(b, start) for b in range(first >> bits, (last >> bits) + 1)]
