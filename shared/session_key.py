"""Session keys: which conversation a turn belongs to (DESIGN.md §3).

`agent:<profile>:<platform>:<chat_type>[:<scope>]:<chat_id>[:<thread_id>][:<user_id>]`, with
`agent:main` for the default profile. DMs: one session per chat. Groups and channels: one per
user when `group_sessions_per_user` (default), one per room otherwise or when the platform gives
no participant id. Threads are shared by all their participants. A group home channel that a
`/handoff` could not open a thread in is shared like a thread while the handed-off session
lives there (producers/intake.py `in_shared_room`).
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.platforms import DM, THREAD
from shared.turns import InboundTurn

DEFAULT_PROFILE = "main"


def key_part(value: str) -> str:
    # Keys are joined by ':'; escape it (and '%') so ids that contain ':' stay unambiguous.
    return value.replace("%", "%25").replace(":", "%3A")


@dataclass(frozen=True, slots=True)
class SessionKey:
    key: str
    shared: bool  # several people talk in this session (turns carry the sender's name)


def derive_session_key(
    turn: InboundTurn,
    *,
    profile: str = DEFAULT_PROFILE,
    group_sessions_per_user: bool = True,
    shared_rooms: frozenset[str] = frozenset(),
) -> SessionKey:
    """The key of the conversation `turn` belongs to, and whether it is a shared room."""
    parts = ["agent", key_part(profile), key_part(turn.platform), key_part(turn.chat_type)]
    if turn.scope:
        parts.append(key_part(turn.scope))
    parts.append(key_part(turn.chat_id))
    in_thread = bool(turn.thread_id) or turn.chat_type == THREAD
    if turn.thread_id:
        parts.append(key_part(turn.thread_id))
    per_user = (
        turn.chat_type != DM
        and not in_thread
        and group_sessions_per_user
        and turn.chat_id not in shared_rooms
        and bool(turn.user_id)
    )
    if per_user and turn.user_id:
        parts.append(key_part(turn.user_id))
    return SessionKey(":".join(parts), shared=turn.chat_type != DM and not per_user)


def room_key(key: str, user_id: str | None) -> str | None:
    """The room's key of a group's per-user key (`...:<chat_id>:<user_id>` → `...:<chat_id>`);
    None when `key` is not `user_id`'s per-user key."""
    if not user_id:
        return None
    room = key.removesuffix(":" + key_part(user_id))
    return room if room != key else None
