"""Which session each route points at: attaching, detaching and moving it, binding a key to a
chosen session (resume, handoff), a handoff's shared room, and a chat whose id changed.

The rows are `routes`' (see `routes` for their arrival counter and lease); this module owns only
their session columns (`session_id`, `pending_title`, `shared_by_handoff`) and a chat's move.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, bindparam, exists, select, update

from shared.db.prepared import Prepared
from shared.db.schema import routes, sessions
from shared.pipeline.routes import Place, insert_bound

# --- the session a route points at ---

# What `session_state` reads, for a statement that reads it along with other rows.
SESSION_STATE_COLUMNS = (
    routes.c.pending_title,
    sessions.c.id.label("live_id"),
    sessions.c.ended_at,
    sessions.c.end_reason,
)
SESSION_STATE_FROM = routes.outerjoin(sessions, sessions.c.id == routes.c.session_id)
_SESSION_STATE = Prepared(
    select(*SESSION_STATE_COLUMNS)
    .select_from(SESSION_STATE_FROM)
    .where(routes.c.session_key == bindparam("b_key"))
)
_ATTACH = Prepared(
    update(routes)
    .where(routes.c.session_key == bindparam("b_key"))
    .values(session_id=bindparam("b_session"), pending_title=None, updated_at=bindparam("b_now"))
)


def session_state(conn: Connection, key: str) -> Any:
    """The route's pending title and its session's id, end and end reason (a mapping; the
    session's fields are None when the route points at none), or None for an unknown key."""
    return _SESSION_STATE.first(conn, {"b_key": key})


def route_session_id(conn: Connection, key: str) -> str | None:
    """The session a route currently points at (None before its first turn or after /new)."""
    value = conn.execute(select(routes.c.session_id).where(routes.c.session_key == key)).scalar()
    return str(value) if value is not None else None


def attach_once(found: Any) -> Any:
    """PostgreSQL: `attach` (bound `b_key`, `b_session`, `b_now`) as a CTE that points the route
    only once `found` (a CTE) has a row, for a statement that carries it."""
    statement: Any = _ATTACH.statement
    return (
        statement.where(exists(select(1).select_from(found)))
        .returning(routes.c.session_key)
        .cte("attached")
    )


def attach(conn: Connection, key: str, session_id: str, now: float) -> None:
    """Point the existing route `key` at `session_id` (a pending title is used up)."""
    _ATTACH.rowcount(conn, {"b_key": key, "b_session": session_id, "b_now": now})


def detach(conn: Connection, key: str, now: float, *, pending_title: str | None = None) -> None:
    """Point the route at no session, so its next turn starts one (titled `pending_title`)."""
    conn.execute(
        update(routes)
        .where(routes.c.session_key == key)
        .values(
            session_id=None, pending_title=pending_title, shared_by_handoff=None, updated_at=now
        )
    )


def detach_session(conn: Connection, key: str, session_id: str, now: float) -> None:
    """Detach the route from `session_id` if it still points there."""
    conn.execute(
        update(routes)
        .where(routes.c.session_key == key)
        .where(routes.c.session_id == session_id)
        .values(session_id=None, shared_by_handoff=None, updated_at=now)
    )


def move_session(conn: Connection, key: str, old_id: str, new_id: str, now: float) -> None:
    """A continuation replaces `old_id` on the route, if it still points there."""
    conn.execute(
        update(routes)
        .where(routes.c.session_key == key, routes.c.session_id == old_id)
        .values(session_id=new_id, updated_at=now)
    )


def bind_route(conn: Connection, key: str, session_id: str, place: Place, now: float) -> None:
    """Point the route `key` at `session_id`, creating the route if it has never had a turn."""
    if _bind(conn, key, session_id, now):
        return
    if insert_bound(conn, key, session_id, place, now):
        return
    _bind(conn, key, session_id, now)  # a first arrival made the row meanwhile


def share_room(conn: Connection, key: str, handoff_id: int) -> None:
    """Make the room key `key` (a group's key without a user) the key of every turn in that
    room, for as long as the route holds its session (see `shared_room`)."""
    conn.execute(
        update(routes).where(routes.c.session_key == key).values(shared_by_handoff=handoff_id)
    )


def shared_room(conn: Connection, key: str) -> bool:
    """Did a handoff share the room key `key` with the whole room, and does its route still
    hold a session? A continuation (compression) keeps it shared; /new, a reset or the
    session's end (detach) gives the room back to per-user keys."""
    found = conn.execute(
        select(routes.c.session_key).where(
            routes.c.session_key == key,
            routes.c.shared_by_handoff.is_not(None),
            routes.c.session_id.is_not(None),
        )
    ).first()
    return found is not None


def unbind_route(
    conn: Connection, key: str, session_id: str, previous: str | None, now: float
) -> None:
    """Undo `bind_route` of `session_id` (a handoff that failed after binding): the route goes
    back to `previous`, and is no longer shared; nothing changes if it moved on since."""
    conn.execute(
        update(routes)
        .where(routes.c.session_key == key, routes.c.session_id == session_id)
        .values(session_id=previous, shared_by_handoff=None, updated_at=now)
    )


def _bind(conn: Connection, key: str, session_id: str, now: float) -> bool:
    done = conn.execute(
        update(routes)
        .where(routes.c.session_key == key)
        .values(session_id=session_id, pending_title=None, updated_at=now)
    )
    return bool(done.rowcount)


# --- a chat that changed its id (Telegram's group → supergroup) ---


@dataclass(frozen=True, slots=True)
class ChatRoute:
    session_key: str
    session_id: str | None
    chat_type: str
    thread_id: str | None
    user_id: str | None


def routes_of_chat(conn: Connection, platform: str, chat_id: str) -> list[ChatRoute]:
    rows = conn.execute(
        select(routes).where(routes.c.platform == platform, routes.c.chat_id == chat_id)
    ).all()
    return [
        ChatRoute(row.session_key, row.session_id, row.chat_type, row.thread_id, row.user_id)
        for row in rows
    ]


def move_to_chat(
    conn: Connection, route: ChatRoute, platform: str, new_chat: str, new_key: str, now: float
) -> None:
    """Give the route's session to `new_key` (made if missing, or taken if it has none) and
    point the old route at the new chat id."""
    place = Place(platform, new_chat, route.chat_type, route.thread_id, route.user_id)
    if not insert_bound(conn, new_key, route.session_id, place, now) and route.session_id:
        # The new key's route exists: it takes the session only if it has none.
        conn.execute(
            update(routes)
            .where(routes.c.session_key == new_key, routes.c.session_id.is_(None))
            .values(session_id=route.session_id, updated_at=now)
        )
    conn.execute(
        update(routes)
        .where(routes.c.session_key == route.session_key)
        .values(chat_id=new_chat, updated_at=now)
    )
