"""A query tree as PostgreSQL conditions: a tsquery for words, gram sets for substrings.

Words are folded here exactly as `ddl.WORD_TEXT_FUNCTION` folds the stored text (lower case,
decomposed, accents dropped, split at everything but letters and digits), and written as
tsquery lexemes (`'chat' <-> 'send'`, `'migra':*`): the tree from `shared.search.query` is the
only structure, nothing typed is read as tsquery syntax.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from itertools import pairwise

from shared.search.postgresql import ddl
from shared.search.query import All, Any, Node, Term

PIECE = 2  # the substring index keys: every 1- and 2-character substring
_SPLIT = re.compile(r"[^\W_]+")


def words_of(text: str) -> list[str]:
    """The indexed words of `text` (`hermes_search_words` in Python)."""
    decomposed = unicodedata.normalize("NFD", text.lower())
    stripped = "".join(ch for ch in decomposed if not 0x300 <= ord(ch) <= 0x36F)
    return _SPLIT.findall(stripped)


def _lexeme(word: str) -> str:
    return "'" + word.replace("\\", "\\\\").replace("'", "''") + "'"


def compile_words(node: Node) -> str | None:
    """The tsquery text of a tree (None: it cannot match, e.g. a term with no word in it)."""
    if isinstance(node, Term):
        words = words_of(node.text)
        if not words:
            return None
        lexemes = [_lexeme(w) for w in words]
        if node.prefix:
            lexemes[-1] += ":*"
        return lexemes[0] if len(lexemes) == 1 else "(" + " <-> ".join(lexemes) + ")"
    if isinstance(node, Any):
        options = [e for e in map(compile_words, node.options) if e is not None]
        return None if not options else "(" + " | ".join(options) + ")"
    assert isinstance(node, All)
    must = [compile_words(child) for child in node.must]
    if not must or any(e is None for e in must):
        return None
    expr = "(" + " & ".join(e for e in must if e is not None) + ")"
    for child in node.must_not:
        excluded = compile_words(child)
        if excluded is not None:
            expr = f"({expr} & !{excluded})"
    return expr


def pair_key(first: str, second: str) -> str:
    """The pairs index's key of two adjacent words (`ddl.PAIRS_FUNCTION` in Python)."""
    digest = hashlib.sha256(f"{first} {second}".encode()).hexdigest()
    return digest[: ddl.PAIR_KEY_CHARS]


def compile_pairs(node: Node) -> str | None:
    """A tsquery on the pairs index (`ddl.pairs`) that every row matching the tree's words
    matches, narrowed by its phrases: a phrase of n words holds the keys of its n - 1 adjacent
    pairs (but a last word typed as a prefix, whose pair has no one key). None: no phrase
    narrows the tree (NOT is left to the words)."""
    if isinstance(node, Term):
        words = words_of(node.text)
        if node.prefix:
            words = words[:-1]
        if len(words) < 2:
            return None
        keys = dict.fromkeys(_lexeme(pair_key(a, b)) for a, b in pairwise(words))
        return "(" + " & ".join(keys) + ")"
    if isinstance(node, Any):
        options = [compile_pairs(option) for option in node.options]
        if not options or any(e is None for e in options):
            return None
        return "(" + " | ".join(e for e in options if e is not None) + ")"
    assert isinstance(node, All)
    must = [e for e in map(compile_pairs, node.must) if e is not None]
    return None if not must else "(" + " & ".join(must) + ")"


def fold(text: str) -> str:
    """What a substring term is compared as: whitespace collapsed, case folded."""
    return " ".join(text.split()).lower()


def pieces(text: str) -> list[str]:
    """The index keys every occurrence of `text` holds: itself when short, else its pairs."""
    if len(text) <= PIECE:
        return [text]
    return list(dict.fromkeys(text[i : i + PIECE] for i in range(len(text) - 1)))


def compile_substrings(node: Node, params: list[object]) -> str | None:
    """A condition on the substring index matching at least the rows the tree does (None: no
    row can match). NOT is left out: `predicate` decides exactly."""
    if isinstance(node, Term):
        text = fold(node.text)
        if not text:
            return None
        params.append(pieces(text))
        return f"{ddl.grams()} @> %s::text[]"
    if isinstance(node, Any):
        options = [e for e in (compile_substrings(c, params) for c in node.options) if e]
        return None if not options else "(" + " OR ".join(options) + ")"
    assert isinstance(node, All)
    must = [compile_substrings(child, params) for child in node.must]
    if any(e is None for e in must):
        return None
    return "(" + " AND ".join(e for e in must if e is not None) + ")"


def predicate(node: Node, params: list[object]) -> str:
    """The tree as a plain SQL condition on m.content (substrings, case-blind)."""
    if isinstance(node, Term):
        needle = fold(node.text)
        params.append(needle)
        caseless = needle == needle.upper()  # Han, kana...: no case to fold
        return "strpos(m.content, %s) > 0" if caseless else "strpos(lower(m.content), %s) > 0"
    if isinstance(node, Any):
        return "(" + " OR ".join(predicate(child, params) for child in node.options) + ")"
    assert isinstance(node, All)
    parts = [predicate(child, params) for child in node.must]
    parts += [f"NOT {predicate(child, params)}" for child in node.must_not]
    return "(" + " AND ".join(parts) + ")"
