"""Session commands: /new, /reset, /title, /stop, /help."""

from __future__ import annotations

from shared.db import Connection
from shared.db.errors import TitleInUse
from shared.pipeline import inbox, route_sessions
from shared.store import sessions as session_rows
from shared.store.resume import close_session
from shared.titles import TitleError, TitleSource, validate_title
from workers.commands.base import Handler
from workers.runtime import Runtime

HELP = """Commands:
/new [name] — start a new session (optionally named)
/title [text] — show or set this session's title
/compress — summarise this session and continue in a fresh one ("x" becomes "x #2")
/resume <name> — switch to one of your earlier sessions (title, id or id prefix)
/sessions — list your recent sessions
/reset — end this session; your next message starts a fresh one
/stop — stop the reply in progress
/sethome — make this chat its platform's home channel (Telegram, Slack, Discord)
/handoff <platform> — continue this session in that platform's home channel
/help — this list"""


def _help(conn: Connection, rt: Runtime, turn: inbox.TurnRow, session_id: str, args: str) -> str:
    return HELP


def _stop(conn: Connection, rt: Runtime, turn: inbox.TurnRow, session_id: str, args: str) -> str:
    cancelled = inbox.cancelled_before(conn, turn.session_key, turn.seq, turn.received_at)
    return "Stopped the reply in progress." if cancelled else "Nothing was running to stop."


def _end_and_detach(
    conn: Connection,
    rt: Runtime,
    turn: inbox.TurnRow,
    session_id: str,
    reason: str,
    pending_title: str | None,
) -> None:
    """End the session (deleted instead if it holds nothing: only commands ran in it) and
    detach the route, so the next message starts a new one."""
    close_session(conn, session_id, reason, rt.clock())
    route_sessions.detach(conn, turn.session_key, rt.clock(), pending_title=pending_title)


def _new(conn: Connection, rt: Runtime, turn: inbox.TurnRow, session_id: str, args: str) -> str:
    title = None
    if args:
        try:
            title = validate_title(args)
        except TitleError as exc:
            return str(exc)
        holder = session_rows.title_holder(conn, title)
        if holder is not None:
            return (
                f"The title '{title}' is taken by session {holder}; pick another "
                "(nothing was started)."
            )
    _end_and_detach(conn, rt, turn, session_id, "new", title)
    return f"Started a new session '{title}'." if title else "Started a new session."


def _reset(conn: Connection, rt: Runtime, turn: inbox.TurnRow, session_id: str, args: str) -> str:
    _end_and_detach(conn, rt, turn, session_id, "reset", None)
    return "Session ended. Your next message starts a fresh one."


def _title(conn: Connection, rt: Runtime, turn: inbox.TurnRow, session_id: str, args: str) -> str:
    session = session_rows.require_session(conn, session_id)
    if not args:
        return (
            f"This session is titled '{session.title}'."
            if session.title
            else ("This session has no title yet. Set one with /title <text>.")
        )
    try:
        session_rows.set_title(conn, session_id, args, TitleSource.USER)
    except (TitleError, TitleInUse) as exc:
        return str(exc)
    return f"Title set to '{validate_title(args)}'."


HANDLERS: dict[str, Handler] = {  # merged into workers.commands.HANDLERS
    "help": _help,
    "stop": _stop,
    "new": _new,
    "reset": _reset,
    "title": _title,
}
