"""Which index a query runs on, for any dialect: words, substrings (Chinese, Japanese...), or
both split by message; and merging the streams of hits.

A query without unsegmented terms goes to the word index; one whose every match must hold
such a term (`中文`, `deploy 中文`) to the substring index; each option of a top-level OR is
routed on its own and the streams merged. A query where such terms may be absent from a match
(`deploy NOT 中文`, `deploy (中文 OR release)`) runs twice, split by message: the messages in
the substring index get the whole query there, the others (which hold no such text) the query
with those terms taken as absent (`deploy`) on the word index.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from shared.search.backend import Hit, Order
from shared.search.query import All, Any, Node, Query, Term


def requires(node: Node) -> bool:
    """Whether every match of `node` holds unsegmented text (so lies in the trigram index)."""
    if isinstance(node, Term):
        return node.unsegmented
    if isinstance(node, All):
        return any(requires(child) for child in node.must)
    return all(requires(child) for child in node.options)


def without_unsegmented(node: Node) -> Node | None:
    """`node` on a message holding no unsegmented text: its unsegmented terms are false there
    (None: the node is false)."""
    if isinstance(node, Term):
        return None if node.unsegmented else node
    if isinstance(node, Any):
        options = [o for o in map(without_unsegmented, node.options) if o is not None]
        return any_of(options)
    must = [without_unsegmented(child) for child in node.must]
    if any(child is None for child in must):
        return None
    must_not = [c for c in map(without_unsegmented, node.must_not) if c is not None]
    kept = [child for child in must if child is not None]
    return kept[0] if len(kept) == 1 and not must_not else All(tuple(kept), tuple(must_not))


def any_of(options: Sequence[Node]) -> Node | None:
    return None if not options else options[0] if len(options) == 1 else Any(tuple(options))


@dataclass(frozen=True, slots=True)
class Routes:
    """Where a query runs: `words` on the word index, `plain_words` there over messages outside
    the trigram index only, `substrings` on the trigram index (None: not there)."""

    words: Node | None
    plain_words: Node | None
    substrings: Node | None

    @property
    def word_tree(self) -> Node | None:
        return any_of([t for t in (self.words, self.plain_words) if t is not None])


def routes(query: Query) -> Routes:
    """Each option of a top-level OR by its terms: none unsegmented → words; every match holds
    one → substrings; else both, split by message (see the module docstring)."""
    tree = query.tree
    if not query.unsegmented:
        return Routes(tree, None, None)
    options = tree.options if isinstance(tree, Any) else (tree,)
    words = [o for o in options if not Query(o).unsegmented]
    mixed = [o for o in options if Query(o).unsegmented]
    plain = [without_unsegmented(o) for o in mixed if not requires(o)]
    return Routes(any_of(words), any_of([p for p in plain if p is not None]), any_of(mixed))


def merge(streams: Sequence[Iterator[Hit]], order: Order) -> Iterator[Hit]:
    if len(streams) == 1:
        return streams[0]
    if order is Order.RELEVANCE:
        return heapq.merge(*streams, key=lambda h: h.score)
    if order is Order.OLDEST:
        return heapq.merge(*streams, key=lambda h: h.message_id)
    return heapq.merge(*streams, key=lambda h: -h.message_id)
