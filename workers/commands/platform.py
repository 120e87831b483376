"""Platform commands: /sethome (this chat is the platform's home), /handoff <platform>, and
Telegram's /start.

/sethome stores the chat (id, type, thread, who ran it) in state_meta as
`home_channel.<platform>`; without one, `platforms.<p>.home_channel` from the settings is used.

/handoff <platform> checks the platform is known, enabled and has a home channel (else refuses,
with the /sethome hint), then records a pending handoff request (shared/store/handoffs.py) and
wakes the worker task that carries it out (workers/handoff.py); the terminal waits on it.
"""

from __future__ import annotations

from shared.db import Connection
from shared.pipeline.inbox import TurnRow
from shared.platforms import CLI, gateway_platforms, registry
from shared.platforms.descriptor import spoken_list
from shared.session_key import derive_session_key
from shared.store import chats, handoffs
from shared.turns import InboundTurn
from workers.commands.base import Handler
from workers.commands.session import HELP
from workers.runtime import Runtime

HANDOFF_WAKE_DELAY = 1.0  # the request commits with this command; wake its task just after


def _sethome(conn: Connection, rt: Runtime, turn: TurnRow, session_id: str, args: str) -> str:
    if turn.platform not in gateway_platforms():
        titles = [p.title for p in registry.platforms().values()]
        return f"/sethome works in a {spoken_list(titles)} chat."
    chats.set_home_channel(
        conn,
        chats.HomeChannel(
            platform=turn.platform,
            chat_id=turn.chat_id,
            chat_type=turn.chat_type,
            thread_id=turn.thread_id,
            user_id=turn.user_id,
            session_key=turn.session_key,
        ),
    )
    return f"This chat is now the {turn.platform} home channel: notices and hand-offs come here."


def home_channel(conn: Connection, rt: Runtime, platform: str) -> chats.HomeChannel | None:
    configured = getattr(rt.settings.platforms, platform, None)
    return chats.get_home_channel(
        conn, platform, configured=configured.home_channel if configured is not None else None
    )


def home_key(rt: Runtime, home: chats.HomeChannel) -> str | None:
    """The key the home channel's next message derives: stored by /sethome, else worked out
    from the id (only where keys carry no workspace scope: Telegram)."""
    if home.session_key is not None:
        return home.session_key
    described = registry.platforms().get(home.platform)
    if described is None or not described.keys_from_chat_id:
        return None
    probe = InboundTurn(
        platform=home.platform,
        chat_id=home.chat_id,
        chat_type=home.chat_type,
        event_id="handoff",
        text="",
        user_id=home.user_id,
        thread_id=home.thread_id,
    )
    platform = getattr(rt.settings.platforms, home.platform)
    return derive_session_key(
        probe,
        group_sessions_per_user=rt.settings.group_sessions_per_user,
        shared_rooms=frozenset(platform.shared_rooms),
    ).key


def _handoff(conn: Connection, rt: Runtime, turn: TurnRow, session_id: str, args: str) -> str:
    target = args.strip().lower()
    if not target:
        return f"Usage: /handoff <{'|'.join(registry.names())}>"
    if target == CLI:
        return "To continue in the terminal, run: hermes -r " + session_id
    if target not in gateway_platforms():
        return f"Unknown platform '{target}'. Use {spoken_list(registry.names())}."
    if target not in rt.senders.platforms():
        configured = getattr(rt.settings.platforms, target, None)
        if configured is not None and not configured.enabled:
            return f"{target} is disabled on this fleet (platforms.{target}.enabled: false)."
        return f"{target} is not configured on this fleet (no token)."
    home = home_channel(conn, rt, target)
    if home is None:
        return f"{target} has no home channel yet: send /sethome in the chat you want there."
    if home.platform == turn.platform and home.chat_id == turn.chat_id:
        return "This chat is already that platform's home channel."
    key = home_key(rt, home)
    if key is None:
        return (
            f"The {target} home channel comes from the settings; send /sethome in it once so "
            "hand-offs know its conversation."
        )
    if handoffs.reply_in_progress(conn, session_id, turn.id):
        return "A reply is being generated: wait for the current reply, then /handoff again."
    already = handoffs.open_for(conn, session_id)
    if already is not None:
        return f"A handoff to {already.platform} is already under way for this session."
    timeout = rt.settings.sessions.handoff_timeout_seconds
    handoff_id = handoffs.request(conn, session_id, turn.session_key, target, rt.clock(), timeout)
    rt.waker.handoff(handoff_id, countdown=HANDOFF_WAKE_DELAY)
    return f"Handing off to {target}: waiting for its gateway to take the session…"


def _start(conn: Connection, rt: Runtime, turn: TurnRow, session_id: str, args: str) -> str:
    """Telegram sends /start when someone first opens the bot (and for deep links)."""
    return "Hello! Just write to talk to me.\n\n" + HELP


HANDLERS: dict[str, Handler] = {  # merged into workers.commands.HANDLERS
    "sethome": _sethome,
    "handoff": _handoff,
    "start": _start,
}
