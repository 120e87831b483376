"""Lineages and references: a session's continuations through `parent_session_id`, and what a
user's session argument (an id, a unique id prefix or a title) names among the sessions a
viewer reaches.

A lineage is a chain of parent links, never a coincidence of titles. A title names the
session that holds it, and resolving it goes on to that session's newest descendant: the
compression chain "my project" → "my project #2" → "my project #3" resumes at "#3". Only
compression gives out the continuation form "x #N" (`continuation_title`); an automatic title
that an unrelated session already holds takes the distinct form "x (2)" (`distinct_title`),
so two unrelated chats never look like one lineage.

When no session holds the title any more (its first sessions were pruned or deleted, which
leaves their continuations without a parent), the name still finds the lineage through its
oldest surviving compression continuation (a derived "x #N"), and goes on from there.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Select, func, select

from shared.db.errors import AmbiguousSession, SessionNotFound
from shared.db.like import starts_with
from shared.db.schema import sessions
from shared.model import SessionRecord
from shared.store.visibility import Viewer, within
from shared.titles import (
    TitleError,
    TitleSource,
    distinct_prefix,
    in_lineage,
    lineage_base,
    lineage_number,
    lineage_prefix,
    next_distinct,
    next_in_lineage,
    validate_title,
)

AMBIGUOUS_SHOWN = 5


def _first(conn: Connection, query: Select[Any]) -> SessionRecord | None:
    row = conn.execute(query.limit(1)).first()
    return SessionRecord.from_row(row) if row else None


def resolve(
    conn: Connection, ref: str, viewer: Viewer | None = None, *, newest: bool = True
) -> SessionRecord:
    """A user's session argument among the sessions `viewer` reaches (None: every session):
    the exact id, then a unique id prefix, then a title — with `newest` (resuming, reading) the
    newest session of the lineage it names; without (deleting, renaming or exporting one
    session) the session holding it.

    Raises SessionNotFound, or AmbiguousSession naming the reachable sessions a prefix matches.
    """
    ref = ref.strip()
    if not ref:
        raise SessionNotFound(ref)
    seen = within(viewer)
    exact = _first(conn, select(sessions).where(sessions.c.id == ref, *seen))
    if exact is not None:
        return exact
    prefixed = [starts_with(sessions.c.id, ref), *seen]
    candidates = conn.execute(
        select(sessions).where(*prefixed).order_by(sessions.c.id.desc()).limit(AMBIGUOUS_SHOWN + 1)
    ).all()
    if len(candidates) == 1:
        return SessionRecord.from_row(candidates[0])
    if len(candidates) > 1:
        total = conn.execute(select(func.count()).select_from(sessions).where(*prefixed))
        shown = [str(row.id) for row in candidates[:AMBIGUOUS_SHOWN]]
        raise AmbiguousSession(ref, shown, more=total.scalar_one() - len(shown))
    by_title = (newest_in_lineage if newest else titled)(conn, ref, viewer)
    if by_title is None:
        raise SessionNotFound(ref)
    return by_title


def titled(conn: Connection, title: str, viewer: Viewer | None = None) -> SessionRecord | None:
    """The session holding `title` (exactly, else case-blind: the newest such), or None."""
    try:
        clean = validate_title(title)
    except TitleError:
        return None
    seen = within(viewer)
    return _first(conn, select(sessions).where(sessions.c.title == clean, *seen)) or _first(
        conn,
        select(sessions)
        .where(func.lower(sessions.c.title) == clean.lower(), *seen)
        .order_by(sessions.c.started_at.desc(), sessions.c.id.desc()),
    )


def newest_in_lineage(
    conn: Connection, title: str, viewer: Viewer | None = None
) -> SessionRecord | None:
    """The newest session of the lineage `title` names: from the session holding it (else
    the oldest surviving continuation), its newest descendant; None if there is none."""
    start = titled(conn, title, viewer)
    if start is None:
        try:
            start = _oldest_continuation(conn, validate_title(title), viewer)
        except TitleError:
            return None
    return None if start is None else newest_descendant(conn, start, viewer)


def _oldest_continuation(
    conn: Connection, title: str, viewer: Viewer | None
) -> SessionRecord | None:
    """The earliest surviving compression continuation of `title` ("x #2", else "x #3" …)."""
    base, floor = lineage_base(title), lineage_number(title)
    rows = conn.execute(
        select(sessions).where(
            starts_with(sessions.c.title, lineage_prefix(base)),
            sessions.c.title_source == TitleSource.DERIVED.label,
            *within(viewer),
        )
    ).all()
    members = [
        SessionRecord.from_row(row)
        for row in rows
        if in_lineage(row.title, base) and lineage_number(row.title) > floor
    ]
    return min(members, key=lambda s: (lineage_number(s.title or ""), s.started_at), default=None)


def newest_descendant(
    conn: Connection, session: SessionRecord, viewer: Viewer | None = None
) -> SessionRecord:
    """The newest (by start) of `session` and every session descending from it through
    parent links that `viewer` reaches. UNION, not UNION ALL: a cycle of links ends."""
    tree = select(sessions.c.id).where(sessions.c.id == session.id).cte("lineage", recursive=True)
    child = sessions.alias("child")
    tree = tree.union(select(child.c.id).where(child.c.parent_session_id == tree.c.id))
    newest = _first(
        conn,
        select(sessions)
        .join(tree, tree.c.id == sessions.c.id)
        .where(*within(viewer))
        .order_by(sessions.c.started_at.desc(), sessions.c.id.desc()),
    )
    return newest or session


def lineage_titles(conn: Connection, title: str) -> list[tuple[str, str, float]]:
    """(title, id, started_at) of every session titled like `title`'s lineage ("x", "x #2" …):
    the numbers compression has given out, not a lineage (that is `newest_descendant`).

    Near the length limit the numbered titles shorten the base, so the LIKE is only a
    pre-filter and `in_lineage` decides.
    """
    base = lineage_base(title)
    rows = conn.execute(
        select(sessions.c.title, sessions.c.id, sessions.c.started_at).where(
            (sessions.c.title == base) | starts_with(sessions.c.title, lineage_prefix(base))
        )
    ).all()
    return [(row.title, row.id, row.started_at) for row in rows if in_lineage(row.title, base)]


def continuation_title(conn: Connection, title: str) -> str:
    """The next free title of `title`'s lineage, for a compression continuation:
    "x" → "x #2" → "x #3"."""
    taken = {member[0] for member in lineage_titles(conn, title)}
    return next_in_lineage(title, taken | {title})


def distinct_title(conn: Connection, title: str) -> str:
    """The first free distinct form of `title` ("x (2)", "x (3)" …), for a session that is no
    relation of the one holding `title`."""
    taken = conn.execute(
        select(sessions.c.title).where(starts_with(sessions.c.title, distinct_prefix(title)))
    ).scalars()
    return next_distinct(title, {str(t) for t in taken})
