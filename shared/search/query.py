"""The search query language: FTS5's syntax, read leniently into a dialect-neutral tree.

Terms AND by default, `"phrases"`, `OR`, `NOT`, `prefix*` and parentheses. What people type by
accident never breaks it: punctuation inside a word stays literal (`chat-send`, `TODO:`, `C++`),
a quote without its partner runs to the end, operators with nothing on one side and unmatched
parentheses are dropped, bits with nothing searchable in them (`*`, emoji alone) are left out
and reported. A query that still means nothing is a `QueryError` saying why. Dialects compile
the tree (`shared.search.sqlite.backend` for FTS5); nothing here knows SQL.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

from shared.unsegmented import has_unsegmented

MAX_QUERY_CHARS = 500
MAX_TERMS = 32
OPERATORS = frozenset({"AND", "OR", "NOT"})


class QueryError(ValueError):
    """A query that cannot mean anything; the message says what was wrong."""


@dataclass(frozen=True, slots=True)
class Term:
    """One word or phrase to find. `text` is as typed (quotes removed); `prefix` for `word*`."""

    text: str
    prefix: bool = False
    phrase: bool = False

    @property
    def unsegmented(self) -> bool:
        return has_unsegmented(self.text)


@dataclass(frozen=True, slots=True)
class All:
    """Every `must` matches and no `must_not` does (FTS5: `a AND b NOT c`)."""

    must: tuple[Node, ...]
    must_not: tuple[Node, ...] = ()


@dataclass(frozen=True, slots=True)
class Any:
    """At least one of `options` matches."""

    options: tuple[Node, ...]


Node = Term | All | Any


@dataclass(frozen=True, slots=True)
class Query:
    tree: Node
    dropped: tuple[str, ...] = field(default=())

    def terms(self, *, positive_only: bool = True) -> list[Term]:
        """The terms in reading order (those under NOT left out unless asked for)."""
        found: list[Term] = []
        _collect(self.tree, found, positive_only)
        return found

    def polarized(self) -> list[tuple[Term, bool]]:
        """Every term with True when it must match, False when it sits under a NOT."""
        found: list[tuple[Term, bool]] = []
        _polarize(self.tree, True, found)
        return found

    @property
    def unsegmented(self) -> bool:
        """True when some term needs substring search (Chinese, Japanese, Thai...)."""
        return any(term.unsegmented for term in self.terms(positive_only=False))

    def __str__(self) -> str:
        return render(self.tree)


def _collect(node: Node, found: list[Term], positive_only: bool) -> None:
    if isinstance(node, Term):
        found.append(node)
    elif isinstance(node, All):
        for child in node.must:
            _collect(child, found, positive_only)
        if not positive_only:
            for child in node.must_not:
                _collect(child, found, positive_only)
    else:
        for child in node.options:
            _collect(child, found, positive_only)


def _polarize(node: Node, positive: bool, found: list[tuple[Term, bool]]) -> None:
    if isinstance(node, Term):
        found.append((node, positive))
    elif isinstance(node, All):
        for child in node.must:
            _polarize(child, positive, found)
        for child in node.must_not:
            _polarize(child, False, found)
    else:
        for child in node.options:
            _polarize(child, positive, found)


def render(node: Node) -> str:
    """The canonical text of a tree, in the same language (what the search really ran)."""
    if isinstance(node, Term):
        quoted = '"' + node.text.replace('"', '""') + '"' if node.phrase else node.text
        return quoted + ("*" if node.prefix else "")
    if isinstance(node, Any):
        return " OR ".join(_group(child) for child in node.options)
    text = " ".join(_group(child) for child in node.must)
    for child in node.must_not:
        text += " NOT " + _group(child)
    return text


def _group(node: Node) -> str:
    if isinstance(node, Term) or (
        isinstance(node, All) and len(node.must) == 1 and not node.must_not
    ):
        return render(node)
    return f"({render(node)})"


def searchable(text: str) -> bool:
    """Whether a word tokenizer would keep anything of `text` (letters, digits, marks)."""
    return any(unicodedata.category(ch)[0] in "LNM" or ch == "_" for ch in text)


# --- lexing ---

_TOKEN = re.compile(
    r'"(?P<phrase>(?:[^"]|"")*)(?:"(?P<star>\*)?|$)|(?P<paren>[()])|(?P<word>[^\s"()]+)'
)


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str  # "term", "op", "(" or ")"
    value: str = ""
    term: Term | None = None


def _lex(text: str, dropped: list[str]) -> list[_Tok]:
    tokens: list[_Tok] = []
    for match in _TOKEN.finditer(text):
        if match.group("paren"):
            tokens.append(_Tok(match.group("paren")))
        elif match.group("word") is not None:
            tokens.extend(_word(match.group("word"), dropped))
        else:
            phrase = " ".join(match.group("phrase").replace('""', '"').split())
            prefix = match.group("star") is not None
            if phrase and (searchable(phrase) or has_unsegmented(phrase)):
                tokens.append(_Tok("term", term=Term(phrase, prefix=prefix, phrase=True)))
            elif phrase:
                dropped.append(f'"{phrase}"')
    return tokens


def _word(word: str, dropped: list[str]) -> list[_Tok]:
    if word in OPERATORS:
        return [_Tok("op", word)]
    prefix = word.endswith("*")
    core = word.rstrip("*").lstrip("*")
    if not core or not (searchable(core) or has_unsegmented(core)):
        dropped.append(word)
        return []
    return [_Tok("term", term=Term(core, prefix=prefix))]


# --- parsing: OR binds loosest, then AND (implicit or spelled), NOT binds to what follows ---


class _Parser:
    def __init__(self, tokens: list[_Tok]) -> None:
        self.tokens = _balance(tokens)
        self.at = 0

    def peek(self) -> _Tok | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self) -> _Tok:
        tok = self.tokens[self.at]
        self.at += 1
        return tok

    def parse_or(self) -> Node | None:
        options: list[Node] = []
        while (tok := self.peek()) is not None and tok.kind != ")":
            if tok.kind == "op" and tok.value == "OR":
                self.take()
                continue
            branch = self.parse_and()
            if branch is not None:
                options.append(branch)
        return _simplify(Any(tuple(options))) if options else None

    def parse_and(self) -> Node | None:
        must: list[Node] = []
        must_not: list[Node] = []
        negate = False
        while (tok := self.peek()) is not None and tok.kind != ")":
            if tok.kind == "op":
                if tok.value == "OR":
                    break
                self.take()
                negate = negate or tok.value == "NOT"
                continue
            node = self.parse_atom()
            if node is not None:
                (must_not if negate else must).append(node)
            negate = False
        if not must and not must_not:
            return None
        return _simplify(All(tuple(must), tuple(must_not)))

    def parse_atom(self) -> Node | None:
        tok = self.take()
        if tok.kind == "term":
            return tok.term
        inner = self.parse_or()  # tok is "(": _balance guarantees the ")"
        self.take()
        return inner


def _balance(tokens: list[_Tok]) -> list[_Tok]:
    """Drop parentheses that have no partner: `foo(bar` is the words foo and bar."""
    keep = [True] * len(tokens)
    stack: list[int] = []
    for i, tok in enumerate(tokens):
        if tok.kind == "(":
            stack.append(i)
        elif tok.kind == ")":
            if stack:
                stack.pop()
            else:
                keep[i] = False
    for i in stack:
        keep[i] = False
    return [tok for tok, kept in zip(tokens, keep, strict=True) if kept]


def _simplify(node: Node) -> Node:
    if isinstance(node, Any):
        flat: list[Node] = []
        for option in node.options:
            flat.extend(option.options if isinstance(option, Any) else [option])
        return flat[0] if len(flat) == 1 else Any(tuple(flat))
    if isinstance(node, All):
        must: list[Node] = []
        must_not = list(node.must_not)
        for child in node.must:
            if isinstance(child, All):
                must.extend(child.must)
                must_not.extend(child.must_not)
            else:
                must.append(child)
        if len(must) == 1 and not must_not:
            return must[0]
        return All(tuple(must), tuple(must_not))
    return node


def _check(node: Node) -> None:
    """Every AND group needs something to look for: FTS5 cannot list what lacks a word."""
    if isinstance(node, All):
        if not node.must:
            excluded = " ".join(render(child) for child in node.must_not)
            raise QueryError(
                f"NOT only excludes, and nothing is left to look for (NOT {excluded}); "
                "add a term to find, e.g. `deploy NOT staging`"
            )
        for child in (*node.must, *node.must_not):
            _check(child)
    elif isinstance(node, Any):
        for child in node.options:
            _check(child)


def parse(text: str) -> Query:
    """Read a query; raise QueryError when nothing searchable is left (the message says why)."""
    if not isinstance(text, str):
        raise QueryError("the query must be text")
    if len(text) > MAX_QUERY_CHARS:
        raise QueryError(
            f"the query is {len(text)} characters long; keep it under {MAX_QUERY_CHARS}"
        )
    text = "".join(ch if ch.isprintable() else " " for ch in text)  # NUL, controls, newlines
    dropped: list[str] = []
    tree = _Parser(_lex(text, dropped)).parse_or()
    if tree is None:
        if not text.strip():
            raise QueryError("the query is empty; omit `query` to browse recent sessions")
        shown = " ".join(dropped) or text.strip()
        raise QueryError(
            f"the query has nothing searchable in it ({shown}): punctuation, emoji and bare "
            "operators are not indexed; search for a word, or omit `query` to browse"
        )
    _check(tree)
    query = Query(tree, tuple(dropped))
    if len(query.terms(positive_only=False)) > MAX_TERMS:
        raise QueryError(f"the query has more than {MAX_TERMS} terms; use fewer, rarer words")
    return query
