"""The seam between the search engine and a dialect: filters, hits, orders, the backend port."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from sqlalchemy import Connection

from shared.model import SessionRecord
from shared.search.query import Query
from shared.store.visibility import Viewer  # who asks; the rule is `shared.store.visibility`

if TYPE_CHECKING:  # reads builds on Filters here
    from shared.search.reads import Message


class Order(enum.Enum):
    RELEVANCE = "relevance"
    NEWEST = "newest"
    OLDEST = "oldest"


@dataclass(frozen=True, slots=True)
class Filters:
    """Which messages may match: their roles, their session's source, one session left out,
    and the sessions `viewer` reaches (`shared.store.visibility.reach`; None: every session)."""

    roles: tuple[str, ...]
    source: str | None = None
    exclude_session_id: str | None = None
    viewer: Viewer | None = None


@dataclass(frozen=True, slots=True)
class Hit:
    """One matching message; `score` orders relevance (lower is better); `index` is "words"
    (matched as words) or "substrings" (matched as substrings, e.g. Chinese)."""

    message_id: int
    session_id: str
    score: float
    index: str


class SearchBackend(Protocol):
    """What a dialect provides. SQLite: `shared.search.sqlite.backend`; PostgreSQL (tsvector for
    words, pg_trgm for substrings) would be a module with the same functions. Everything else in
    `shared.search` (parsing, lineage, shapes, limits) is dialect-neutral."""

    def hits(self, conn: Connection, query: Query, filters: Filters, order: Order) -> Iterator[Hit]:
        """Matching messages best first for `order`, each once, lazily (callers stop early)."""
        ...

    def snippets(self, conn: Connection, query: Query, found: Sequence[Hit]) -> dict[int, str]:
        """Matched text with the terms marked, by message id; the engine marks the rest."""
        ...

    def message(self, conn: Connection, message_id: int) -> Message | None: ...

    def around(
        self, conn: Connection, anchor: Message, size: int, roles: Sequence[str]
    ) -> list[Message]:
        """Up to `size` messages of `roles` each side of `anchor`, and `anchor`, in order."""
        ...

    def ends(
        self, conn: Connection, session_id: str, roles: Sequence[str], count: int
    ) -> tuple[list[Message], list[Message]]: ...

    def sessions_by_id(
        self, conn: Connection, ids: Iterable[str], viewer: Viewer | None = None
    ) -> dict[str, SessionRecord]:
        """The sessions of `ids` that `viewer` may see (None: all of them)."""
        ...

    def parents(self, conn: Connection, ids: Iterable[str]) -> dict[str, str | None]: ...

    def recent_sessions(
        self,
        conn: Connection,
        *,
        source: str | None,
        exclude: str | None,
        limit: int,
        offset: int,
        viewer: Viewer | None = None,
    ) -> list[SessionRecord]: ...

    def first_text(self, conn: Connection, session_id: str, role: str, chars: int) -> str: ...

    def count_between(
        self, conn: Connection, session_id: str, roles: Sequence[str], low: int, high: int
    ) -> int: ...
