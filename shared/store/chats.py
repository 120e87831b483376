"""Chats as places: home channels per platform, and a chat whose id changed (Telegram migration).

Session keys embed the chat id (`agent:main:telegram:group:<chat_id>:<user>`), so a Telegram
group that becomes a supergroup (new id) would otherwise start over. `migrate_chat` re-points
the conversation instead of renaming keys in place (keys are primary keys that the inbox and
leases refer to): for every route of the old chat it creates (or fills) the route the new
chat's turns will derive, pointing at the same current session. Turns still waiting under an
old key keep that key and its lease (they drain in order as before) but are answered in the
new chat; pending replies move to the new chat's lane; the sessions, and the platform's home
channel, take the new chat id. Running it twice is a no-op.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy import Connection

from shared.db.meta import get_meta, set_meta
from shared.pipeline import inbox as inbox_rows
from shared.pipeline import outbox as outbox_rows
from shared.pipeline import route_sessions
from shared.store import sessions as session_rows

HOME_PREFIX = "home_channel."


@dataclass(frozen=True, slots=True)
class HomeChannel:
    """Where a platform's notices and hand-offs go.

    `user_id` is whoever ran /sethome there and `session_key` the key of that conversation
    (exact, scope included); a home channel from the settings knows neither.
    """

    platform: str
    chat_id: str
    chat_type: str
    thread_id: str | None = None
    user_id: str | None = None
    session_key: str | None = None
    source: str = "sethome"  # sethome | settings

    def as_json(self) -> str:
        return json.dumps(
            {
                "chat_id": self.chat_id,
                "chat_type": self.chat_type,
                "thread_id": self.thread_id,
                "user_id": self.user_id,
                "session_key": self.session_key,
            },
            sort_keys=True,
        )


def home_key(platform: str) -> str:
    return HOME_PREFIX + platform


def set_home_channel(conn: Connection, home: HomeChannel) -> None:
    set_meta(conn, home_key(home.platform), home.as_json())


def get_home_channel(
    conn: Connection, platform: str, *, configured: str | None = None
) -> HomeChannel | None:
    """The chat /sethome stored for `platform`, else the configured `home_channel` id."""
    raw = get_meta(conn, home_key(platform))
    if raw:
        try:
            data = json.loads(raw)
            return HomeChannel(
                platform=platform,
                chat_id=str(data["chat_id"]),
                chat_type=str(data.get("chat_type") or "dm"),
                thread_id=data.get("thread_id"),
                user_id=data.get("user_id"),
                session_key=data.get("session_key"),
            )
        except (ValueError, KeyError, TypeError):
            pass  # a damaged value: fall back to the configured one
    if configured:
        return HomeChannel(
            platform=platform,
            chat_id=configured,
            chat_type=guess_chat_type(platform, configured),
            source="settings",
        )
    return None


def guess_chat_type(platform: str, chat_id: str) -> str:
    """The chat type an id alone suggests (a configured home channel has nothing more)."""
    from shared.platforms import registry

    found = registry.platforms().get(platform)
    return found.chat_type_of(chat_id) if found is not None else "channel"


@dataclass(frozen=True, slots=True)
class Migration:
    routes: int
    turns: int
    replies: int
    sessions: int
    home_moved: bool


def _swap_chat_segment(key: str, old_part: str, new_part: str) -> str:
    """`agent:p:telegram:group:<old>:u` → `agent:p:telegram:group:<new>:u` (the first match)."""
    parts = key.split(":")
    for index in range(4, len(parts)):
        if parts[index] == old_part:
            parts[index] = new_part
            return ":".join(parts)
    return key


def _key_part(value: str) -> str:
    return value.replace("%", "%25").replace(":", "%3A")  # as shared.session_key escapes ids


def migrate_chat(conn: Connection, platform: str, old: str, new: str, now: float) -> Migration:
    """Move `platform` chat `old` to its new id `new` (inside one write transaction)."""
    if old == new:
        return Migration(0, 0, 0, 0, home_moved=False)
    moved_routes = 0
    for route in route_sessions.routes_of_chat(conn, platform, old):
        new_key = _swap_chat_segment(route.session_key, _key_part(old), _key_part(new))
        if new_key == route.session_key:
            continue
        route_sessions.move_to_chat(conn, route, platform, new, new_key, now)
        if route.session_id is not None:
            session_rows.move_to_chat(conn, route.session_id, new, new_key)
        moved_routes += 1
    turns = inbox_rows.move_chat(conn, platform, old, new)
    replies = outbox_rows.move_chat(conn, platform, old, new)
    other_sessions = session_rows.move_chat(conn, platform, old, new)
    home = get_home_channel(conn, platform)  # only a /sethome one: settings are not ours to edit
    home_moved = home is not None and home.chat_id == old
    if home is not None and home_moved:
        key = home.session_key
        if key is not None:
            key = _swap_chat_segment(key, _key_part(old), _key_part(new))
        set_home_channel(
            conn, HomeChannel(platform, new, home.chat_type, home.thread_id, home.user_id, key)
        )
    return Migration(moved_routes, turns, replies, moved_routes + other_sessions, home_moved)
