"""Sessions read in bulk: the listing page with previews, counts and per-source stats (the
rows themselves, one at a time, are `shared.store.sessions`')."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Select, bindparam, func, select

from shared.db.prepared import Prepared
from shared.db.schema import messages, sessions, source_stats
from shared.mentions import without_mentions
from shared.model import SessionRecord
from shared.store.sessions import RECORD_COLUMNS

PREVIEW_CHARS = 60


@dataclass(frozen=True, slots=True)
class SessionListing:
    record: SessionRecord
    preview: str


def list_sessions(
    conn: Connection, *, source: str | None = None, limit: int = 20, offset: int = 0
) -> tuple[list[SessionListing], bool]:
    """Newest activity first, with a preview of the first user message; (rows, more exist).

    The page is chosen on (last_active_at, id) alone and its rows read after: OFFSET over whole
    rows sorts every skipped session's columns (system prompt included), 8 ms at offset 10,000
    of 20,000 sessions; the narrow pick skips them through the index. The statement is built
    and compiled once (`_LISTING`): building it per call cost twice the query itself."""
    params: dict[str, Any] = {"b_limit": limit + 1, "b_offset": offset}
    if source:
        params["b_source"] = source
    rows = _LISTING[bool(source)].rows(conn, params)
    more = len(rows) > limit
    listings = []
    for values in rows[:limit]:  # by position: a dict per row cost a third of the query
        listings.append(
            SessionListing(SessionRecord(*values[:-1]), _preview(values[-1], PREVIEW_CHARS))
        )
    return listings, more


def _listing(by_source: bool) -> Prepared:
    order = (sessions.c.last_active_at.desc(), sessions.c.id.desc())
    page = select(sessions.c.id).order_by(*order)
    if by_source:
        page = page.where(sessions.c.source == bindparam("b_source"))
    ids = page.limit(bindparam("b_limit")).offset(bindparam("b_offset")).scalar_subquery()
    first = _first_user_content(sessions.c.id, PREVIEW_CHARS).label("b_preview")
    return Prepared(select(*RECORD_COLUMNS, first).where(sessions.c.id.in_(ids)).order_by(*order))


def _first_user_content(session_id: Any, chars: int) -> Any:
    """The start of a session's first user message (enough for a `chars` preview), as a scalar
    subquery: the listing reads its previews in the same statement as its rows."""
    return (
        select(func.substr(messages.c.content, 1, chars * 4))
        .where(messages.c.session_id == session_id, messages.c.role == "user")
        .order_by(messages.c.id)
        .limit(1)
        .scalar_subquery()
    )


_LISTING = {False: _listing(False), True: _listing(True)}


def _preview(content: object, chars: int) -> str:
    if not content:
        return ""
    flat = " ".join(without_mentions(str(content)).split())
    return flat if len(flat) <= chars else flat[: chars - 1].rstrip() + "…"


def first_user_text(conn: Connection, session_id: str, chars: int = PREVIEW_CHARS) -> str:
    return _preview(conn.execute(select(_first_user_content(session_id, chars))).scalar(), chars)


@dataclass(frozen=True, slots=True)
class StoreStats:
    sessions: int
    messages: int
    by_source: list[tuple[str, int, int]]


def stats(conn: Connection) -> StoreStats:
    """Sessions and messages in all and per source, most sessions first.

    SQLite reads its trigger-kept per-source counters (constant time at any size). PostgreSQL
    keeps no such row (shared.db.postgresql: every append would lock it) and sums the
    per-session counts instead, from the index that carries them (revision 0021)."""
    rows = conn.execute(stats_query(conn)).all()
    by_source = sorted(
        ((str(row.source), int(row.sessions), int(row.messages)) for row in rows),
        key=lambda entry: (-entry[1], entry[0]),
    )
    return StoreStats(
        sessions=sum(r[1] for r in by_source),
        messages=sum(r[2] for r in by_source),
        by_source=by_source,
    )


def stats_query(conn: Connection) -> Select[Any]:
    """source, sessions, messages per source (rows of a source with no sessions may be left)."""
    if _source_counters_kept(conn):
        query = select(source_stats.c.source, source_stats.c.sessions, source_stats.c.messages)
        return query.where(source_stats.c.sessions > 0)
    return select(
        sessions.c.source.label("source"),
        func.count().label("sessions"),
        func.sum(sessions.c.message_count).label("messages"),
    ).group_by(sessions.c.source)


def _source_counters_kept(conn: Connection) -> bool:
    """Whether `source_stats` is kept (by SQLite's triggers; not on PostgreSQL)."""
    return conn.dialect.name == "sqlite"


def count_sessions(conn: Connection, *, source: str | None = None) -> int:
    """How many sessions (of one source): SQLite reads its trigger-kept counters; PostgreSQL
    counts through the (source, last_active_at, id) index."""
    if _source_counters_kept(conn):
        query = select(func.coalesce(func.sum(source_stats.c.sessions), 0))
        if source:
            query = query.where(source_stats.c.source == source)
    else:
        query = select(func.count()).select_from(sessions)
        if source:
            query = query.where(sessions.c.source == source)
    return int(conn.execute(query).scalar_one())
