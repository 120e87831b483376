"""Prefix queries on PostgreSQL through the prefix index (`ddl.prefixes`, revision 0022): which
queries it drives (`start_of`), the id windows it reads them in (`edges`, whole buckets) and the
keys of one window (`keys`).

GIN answers `'snoo':*` from the word index by building the bitmap of every word the prefix
expands to, over every id, for each statement: 35-145 ms for a prefix in 0.3-5% of 1.5M
messages, where the newest few hundred matches are wanted. The prefix index keys each word by
its first PREFIX_CHARS characters and its message's id bucket (8,192 ids), so a window of the
newest ids reads the entries of its buckets only: a few hundred rows for a dense prefix.
"""

from __future__ import annotations

from collections.abc import Sequence

from shared.search.backend import Order
from shared.search.postgresql import ddl
from shared.search.postgresql.compiler import words_of
from shared.search.query import Node, Term

GROWTH = 4  # each window holds this many times the buckets of the one before


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


def edges(span: tuple[int, int], order: Order) -> list[int]:
    """The edges of the windows a keyed prefix is read in from the end `order` starts at (as
    `windows.windows`'s): the bucket holding the newest id (for OLDEST, the oldest), then GROWTH
    times as many buckets each, until the id range `span` is covered."""
    low, high = span
    size = 1 << ddl.BUCKET_BITS
    found: list[int] = []
    buckets = 1
    if order is Order.OLDEST:
        edge = ((low >> ddl.BUCKET_BITS) + 1) << ddl.BUCKET_BITS
        while edge <= high:
            found.append(edge)
            buckets *= GROWTH
            edge += buckets * size
        return found
    edge = (high >> ddl.BUCKET_BITS) << ddl.BUCKET_BITS
    while edge > low:
        found.append(edge)
        buckets *= GROWTH
        edge -= buckets * size
    return found


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
