"""FTS5 expressions for a query tree: words (unicode61) and substrings (trigram + vocabulary).

Every term is quoted, so nothing a person types is read as FTS5 syntax (column filters, `^`,
NEAR): the tree from `shared.search.query` is the only structure. For the trigram index a
term of 1-2 characters becomes the OR of the indexed trigrams that begin with it (the indexed
text is padded, see `ddl`, so that covers every occurrence).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from shared.search.query import All, Any, Node, Term

TRIGRAM = 3
ANY_ROW = ""  # with `Expander.unbounded`: a term too common to narrow the rows down
MAX_CODE_POINT = chr(0x10FFFF)


def quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def fold(text: str) -> str:
    """What the trigram tokenizer compares: whitespace collapsed, case folded."""
    return " ".join(text.split()).lower()


def compile_words(node: Node) -> str:
    """The FTS5 expression of a tree for the unicode61 index."""
    if isinstance(node, Term):
        return quote(node.text) + ("*" if node.prefix else "")
    if isinstance(node, Any):
        return "(" + " OR ".join(compile_words(child) for child in node.options) + ")"
    assert isinstance(node, All)
    expr = "(" + " AND ".join(compile_words(child) for child in node.must) + ")"
    for child in node.must_not:
        expr = f"({expr} NOT {compile_words(child)})"
    return expr


@dataclass
class Expander:
    """Short terms → the trigrams they begin; notes when a list was cut at `cap`."""

    db: sqlite3.Connection
    cap: int | None
    overflowed: bool = False
    seen: dict[str, list[str]] = field(default_factory=dict)
    cut: set[str] = field(default_factory=set)  # the terms whose list was cut
    # An overflowing term becomes ANY_ROW (no narrowing) instead of a cut list of trigrams.
    unbounded: bool = False

    def trigrams(self, text: str) -> list[str]:
        if text in self.seen:
            return self.seen[text]
        limit = -1 if self.cap is None else self.cap + 1
        rows = self.db.execute(
            "SELECT term FROM messages_cjk_vocab WHERE term >= ? AND term < ? LIMIT ?",
            (text, text + MAX_CODE_POINT, limit),
        ).fetchall()
        if self.cap is not None and len(rows) > self.cap:
            self.overflowed = True
            self.cut.add(text)
            rows = rows[: self.cap]
        self.seen[text] = [str(row[0]) for row in rows]
        return self.seen[text]


def compile_substrings(node: Node, expander: Expander) -> str | None:
    """An FTS5 expression for the trigram index that matches at least the rows the tree does
    (None: no row can match). The index keeps no positions (detail=none), so a term is the AND
    of its trigrams and NOT is left out; `predicate` then decides exactly."""
    if isinstance(node, Term):
        text = fold(node.text)
        if len(text) >= TRIGRAM:
            grams = list(dict.fromkeys(text[i : i + TRIGRAM] for i in range(len(text) - 2)))
            return _joined(" AND ", [quote(g) for g in grams])
        grams = expander.trigrams(text)
        if expander.unbounded and text in expander.cut:
            return ANY_ROW
        return _joined(" OR ", [quote(g) for g in grams]) if grams else None
    if isinstance(node, Any):
        compiled = [compile_substrings(c, expander) for c in node.options]
        if ANY_ROW in compiled:
            return ANY_ROW
        options = [e for e in compiled if e]
        return _joined(" OR ", options) if options else None
    assert isinstance(node, All)
    must = [compile_substrings(child, expander) for child in node.must]
    if any(e is None for e in must):
        return None
    narrowing = [e for e in must if e and e != ANY_ROW]
    # A common short term narrows nothing: the other terms choose the rows, `predicate` checks it.
    return _joined(" AND ", narrowing) if narrowing else ANY_ROW


def _joined(operator: str, parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else "(" + operator.join(parts) + ")"


def predicate(node: Node, params: list[object]) -> str:
    """The tree as a plain SQL condition on m.content (substrings, ASCII case-blind)."""
    if isinstance(node, Term):
        needle = fold(node.text)
        params.append(needle)
        caseless = needle == needle.upper()  # Han, kana...: no case to fold
        return "instr(m.content, ?) > 0" if caseless else "instr(lower(m.content), ?) > 0"
    if isinstance(node, Any):
        return "(" + " OR ".join(predicate(child, params) for child in node.options) + ")"
    assert isinstance(node, All)
    parts = [predicate(child, params) for child in node.must]
    parts += [f"NOT {predicate(child, params)}" for child in node.must_not]
    return "(" + " AND ".join(parts) + ")"
