"""Session search: one engine, four call shapes (discover, scroll, read, browse), JSON-ready.

`search(store, request)` never raises for bad input: a request or query that cannot mean
anything comes back as `{"error": ..., "mode": ...}`.

Decisions:
- A lineage (sessions linked by parent_session_id, e.g. a compression chain) counts once in
  discover and browse: the best hit of the whole lineage stands for it, shown in the session
  that holds it.
- `current_session_id` leaves out that session's own messages (they are in the live context).
  Its ancestors stay searchable: what was compressed away is exactly what one wants back.
- `role_filter` picks the roles that are searched and shown in windows; bookends are always
  the first and last user/assistant messages (less those already in the window). The anchor
  is shown even when its role is not in the filter (a scroll may start anywhere).
- `messages_before`/`messages_after` count the messages the window shows before and after
  the anchor: fewer than `window` means it reaches the start/end of the session.
- Relevance is bm25 within the newest matches (see `shared.search.sqlite.backend`); `newest` and
  `oldest` follow message order.
- Matched terms are marked ⟦like this⟧ in snippets. Contents are clipped (anchor 2000, window
  600, bookends 300, read 1200 characters) with the number of characters left out; `read`
  shows the first and last 30 messages of a longer session and says how many lie between.
- `browse` lists the most recent session of each lineage, never the current session.
- `viewer` (the agent's asker) limits every shape to the sessions they may see, inside the
  queries themselves: the best `limit` lineages are the best visible ones, and an ambiguous id
  prefix names only visible sessions. No viewer (the operator's `hermes sessions search`, code):
  every session.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from sqlalchemy import Connection

from shared.db.engine import Store
from shared.db.errors import AmbiguousSession, SessionNotFound
from shared.mentions import without_mentions
from shared.model import SessionRecord
from shared.search import views
from shared.search.backend import Filters, Hit, SearchBackend
from shared.search.query import Query, QueryError, parse
from shared.search.reads import Message, Reads, Shown
from shared.search.request import RequestError, SearchRequest
from shared.store import lineage
from shared.store.visibility import Viewer
from shared.wording import plural

CONVERSATION_ROLES = ("user", "assistant")
BOOKEND = 3
MAX_HITS = 4000  # matching messages looked at before discover stops filling `limit`
HIT_GROUP = 32
READ_HEAD = 30
READ_TAIL = 30
READ_CHARS = 1200
BROWSE_ROUNDS = 5


def backend_for(dialect: str) -> SearchBackend | None:
    if dialect == "sqlite":
        from shared.search.sqlite import backend as sqlite_search

        return sqlite_search
    if dialect == "postgresql":
        from shared.search.postgresql import backend as postgresql_search

        return postgresql_search
    return None


def reads_for(dialect: str) -> Reads:
    """The dialect's row reads (`shared.search.reads`, bound to its driver and marks)."""
    if dialect == "sqlite":
        from shared.search.sqlite.rows import READS as sqlite_reads

        return sqlite_reads
    if dialect == "postgresql":
        from shared.search.postgresql.rows import READS as postgresql_reads

        return postgresql_reads
    raise ValueError(f"no search reads for {dialect}")  # search() checks backend_for first


def error(mode: str, message: str) -> dict[str, Any]:
    return {"mode": mode, "error": message}


def search(store: Store, request: SearchRequest) -> dict[str, Any]:
    """Run one session_search call; the result (or error object) is plain JSON data."""
    try:
        request = request.checked()
    except RequestError as exc:
        return error(request.mode, str(exc))
    backend = backend_for(store.dialect)
    if backend is None:
        return error(request.mode, f"session search is not available on {store.dialect} yet")
    with store.read() as conn:
        if not conn.in_transaction():
            conn.begin()  # one snapshot for every query of this call, raw ones included
        if request.mode == "discover":
            return discover(conn, backend, request)
        if request.mode == "scroll":
            return scroll(conn, backend, request)
        if request.mode == "read":
            return read(conn, backend, request)
        return browse(conn, backend, request)


@dataclass
class _Picked:
    hit: Hit
    root: str


def _pick(
    conn: Connection,
    backend: SearchBackend,
    found: Iterator[Hit],
    limit: int,
    records: dict[str, SessionRecord],
    viewer: Viewer | None,
) -> tuple[list[_Picked], bool]:
    """The best hit of each of the first `limit` lineages; (picks, stopped at MAX_HITS).

    Hits are taken in groups that end as soon as they hold as many sessions not seen yet as
    lineages are still wanted (or at HIT_GROUP hits): a backend that looks hits up lazily is
    asked for no more than the answer needs, and lineage roots are walked for those only.
    The rows of those sessions (those `viewer` may see) go to `records`: the walk starts from
    their parent_session_id and the results are made of them, one statement for both."""
    roots: dict[str, str] = {}
    picked: dict[str, _Picked] = {}
    looked = 0
    while len(picked) < limit:
        if looked >= MAX_HITS:
            return list(picked.values()), True
        group: list[Hit] = []
        fresh: set[str] = set()
        for hit in found:
            group.append(hit)
            if hit.session_id not in roots:
                fresh.add(hit.session_id)
            if len(fresh) >= limit - len(picked) or len(group) == HIT_GROUP:
                break
        if not group:
            break
        looked += len(group)
        records.update(backend.sessions_by_id(conn, fresh, viewer))
        known = {sid: records[sid].parent_session_id for sid in fresh if sid in records}
        views.lineage_roots(partial(backend.parents, conn), fresh, roots, known)
        for hit in group:
            root = roots[hit.session_id]
            if root not in picked:
                picked[root] = _Picked(hit, root)
                if len(picked) == limit:
                    break
    return list(picked.values()), False


def discover(conn: Connection, backend: SearchBackend, request: SearchRequest) -> dict[str, Any]:
    assert request.query is not None
    try:
        query = parse(request.query)
    except QueryError as exc:
        return error("discover", f"cannot search for {request.query!r}: {exc}")
    order = request.order
    filters = Filters(request.roles, request.source, request.current_session_id, request.viewer)
    found = backend.hits(conn, query, filters, order)
    try:
        records: dict[str, SessionRecord] = {}
        picks, gave_up = _pick(
            conn, backend, found, request.discover_limit, records, request.viewer
        )
    except QueryError as exc:  # the index itself refused it: still an answer, not a crash
        return error("discover", f"cannot search for {request.query!r}: {exc}")
    picks = [pick for pick in picks if pick.hit.session_id in records]
    shown = reads_for(conn.dialect.name).shown(
        conn,
        [(pick.hit.message_id, pick.hit.session_id) for pick in picks],
        request.window,
        request.roles,
        CONVERSATION_ROLES,
        BOOKEND,
    )
    snippets = _snippets(conn, backend, query, picks, shown)
    results = [
        _result(pick, records[pick.hit.session_id], shown[pick.hit.message_id], snippets)
        for pick in picks
        if pick.hit.message_id in shown
    ]
    out: dict[str, Any] = {
        "mode": "discover",
        "query": str(query),
        "sort": order.value,
        "count": len(results),
        "results": results,
    }
    notes = []
    if query.dropped:
        notes.append(f"ignored {' '.join(query.dropped)} (nothing searchable in it)")
    if not results:
        notes.append(
            "no earlier conversation matches; try fewer or other words, a prefix (deploy*), "
            "another role_filter, or call without a query to browse recent sessions"
        )
    if gave_up:
        notes.append(f"stopped after {MAX_HITS} matching messages; narrow the query for more")
    if notes:
        out["note"] = "; ".join(notes)
    return out


def _snippets(
    conn: Connection,
    backend: SearchBackend,
    query: Query,
    picks: list[_Picked],
    shown: dict[int, Shown],
) -> dict[int, str]:
    """Each result's snippet: its anchor with the terms marked here (`views.highlight`); the
    backend's own (FTS5's snippet) only for an anchor where that marks nothing, e.g. a word
    matched through its diacritics. At 1.5M messages FTS5 seeks every matching word's doclist
    to each row it snippets, 0.4-0.8 ms a row for common words."""
    terms = query.terms()
    out: dict[int, str] = {}
    unmarked: list[Hit] = []
    for pick in picks:
        found = shown.get(pick.hit.message_id)
        if found is None:
            continue
        text = found.anchor.content or ""
        out[pick.hit.message_id] = views.highlight(text, terms, words=pick.hit.index == "words")
        if views.MARK_OPEN not in out[pick.hit.message_id]:
            unmarked.append(pick.hit)
    if unmarked:
        out.update(backend.snippets(conn, query, unmarked))
    return out


def _result(
    pick: _Picked, session: SessionRecord, shown: Shown, snippets: dict[int, str]
) -> dict[str, Any]:
    anchor = shown.anchor
    in_window = {m.id for m in shown.window}
    start = [m for m in shown.first if m.id not in in_window]
    firsts = {f.id for f in shown.first}
    end = [m for m in shown.last if m.id not in in_window and m.id not in firsts]
    result: dict[str, Any] = {
        "session_id": session.id,
        "title": session.title,
        "when": views.when(anchor.timestamp),
        "source": session.source,
        "snippet": snippets[anchor.id],
        "bookend_start": [views.message_dict(m, views.BOOKEND_CHARS) for m in start],
        "messages": [_window_message(m, anchor.id) for m in shown.window],
        "bookend_end": [views.message_dict(m, views.BOOKEND_CHARS) for m in end],
        "match_message_id": anchor.id,
        **_sides(shown.window, anchor.id),
    }
    if pick.root != session.id:
        result["lineage_root_id"] = pick.root
    return result


def _window_message(message: Message, anchor_id: int) -> dict[str, Any]:
    if message.id == anchor_id:
        return views.message_dict(message, views.ANCHOR_CHARS, anchor=True)
    return views.message_dict(message, views.WINDOW_CHARS)


def scroll(conn: Connection, backend: SearchBackend, request: SearchRequest) -> dict[str, Any]:
    assert request.session_id is not None and request.around_message_id is not None
    anchor = backend.message(conn, request.around_message_id)
    seen = (
        {} if anchor is None else backend.sessions_by_id(conn, [anchor.session_id], request.viewer)
    )
    if anchor is None or anchor.session_id != request.session_id or anchor.session_id not in seen:
        return error(
            "scroll",
            f"message {request.around_message_id} is not in session {request.session_id}; "
            "pass a session_id and a message id from the same result",
        )
    session = seen[anchor.session_id]
    shown = backend.around(conn, anchor, request.window, request.roles)
    return {
        "mode": "scroll",
        "session_id": session.id,
        "title": session.title,
        "source": session.source,
        "around_message_id": anchor.id,
        "window": request.window,
        "messages": [_window_message(m, anchor.id) for m in shown],
        **_sides(shown, anchor.id),
    }


def _sides(shown: list[Message], anchor_id: int) -> dict[str, int]:
    """How many of the window's messages come before and after its anchor."""
    before = sum(1 for m in shown if m.id < anchor_id)
    return {"messages_before": before, "messages_after": len(shown) - before - 1}


def read(conn: Connection, backend: SearchBackend, request: SearchRequest) -> dict[str, Any]:
    """The session (exact id, unique id prefix or title), its head and tail when very long."""
    assert request.session_id is not None
    try:
        session = lineage.resolve(conn, request.session_id, request.viewer)
    except (SessionNotFound, AmbiguousSession) as exc:
        return error("read", str(exc))
    first, last = backend.ends(conn, session.id, request.roles, READ_HEAD + READ_TAIL)
    omitted = 0
    shown = first
    if len(first) == READ_HEAD + READ_TAIL:  # maybe longer: the head and the tail
        head, tail = first[:READ_HEAD], last[-READ_TAIL:]
        omitted = backend.count_between(conn, session.id, request.roles, head[-1].id, tail[0].id)
        shown = [*head, *tail]
    out: dict[str, Any] = {"mode": "read", **views.session_dict(session)}
    out["messages"] = [views.message_dict(m, READ_CHARS) for m in shown]
    if omitted:
        out["omitted_messages"] = omitted
        out["note"] = (
            f"{plural(omitted, 'message')} after message {shown[READ_HEAD - 1].id} "
            f"{'is' if omitted == 1 else 'are'} left out; scroll with session_id and "
            "around_message_id to read them"
        )
    return out


def browse(conn: Connection, backend: SearchBackend, request: SearchRequest) -> dict[str, Any]:
    """Recent sessions, newest activity first, one per lineage (its most recent session)."""
    roots: dict[str, str] = {}
    chosen: dict[str, SessionRecord] = {}
    want = request.browse_limit
    batch = want * 3
    more = False
    for round_no in range(BROWSE_ROUNDS):
        rows = backend.recent_sessions(
            conn,
            source=request.source,
            exclude=request.current_session_id,
            limit=batch + 1,
            offset=round_no * batch,
            viewer=request.viewer,
        )
        known = {r.id: r.parent_session_id for r in rows}
        views.lineage_roots(partial(backend.parents, conn), known, roots, known)
        for record in rows[:batch]:
            if len(chosen) == want:
                more = True
                break
            chosen.setdefault(roots[record.id], record)
        if len(chosen) == want or len(rows) <= batch:
            more = more or len(rows) > batch
            break
    listed = []
    for record in chosen.values():
        item = views.session_dict(record)
        text = backend.first_text(conn, record.id, "user", views.PREVIEW_CHARS * 2)
        item["preview"] = views.clip(" ".join(without_mentions(text).split()), views.PREVIEW_CHARS)
        listed.append(item)
    return {"mode": "browse", "count": len(listed), "sessions": listed, "more": more}
