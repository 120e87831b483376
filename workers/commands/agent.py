"""Agent commands: /compress, /resume <name>, /sessions.

/compress calls the auxiliary model, so it runs in two steps like a turn: the summary with no
transaction open, then the continuation, the answer and the turn's status in one fenced write
(`run_model_command`; the drain sends MODEL_COMMANDS there instead of to `run_command`).

/resume and /sessions only reach sessions the requester may see (shared.store.visibility):
in the terminal, every session of every platform (the owner's); on a gateway platform, the
sender's own sessions on that platform. /resume points this chat's route at the session (the
newest of its compression lineage), reopening it if it had ended (left, /new, /reset).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from shared.commands import Command
from shared.db import Connection
from shared.db.errors import AmbiguousSession, SessionNotFound
from shared.model import SessionRecord
from shared.pipeline import inbox, outbox, route_sessions, routes
from shared.store import lineage
from shared.store import sessions as session_rows
from shared.store.resume import drop_if_empty, lineage_head
from shared.store.sessions import reopen_session
from shared.store.visibility import Viewer, recent_sessions
from shared.wording import plural
from workers.agent.auxiliary import AuxiliaryUnavailable
from workers.agent.client import Stopped
from workers.agent.compression import continue_session, summarise
from workers.commands.base import Handler, answer_rows
from workers.flush import deliver_now
from workers.renewer import Held
from workers.runtime import Runtime

log = logging.getLogger(__name__)

LISTED = 10


def _name(session: SessionRecord) -> str:
    return f"'{session.title}' ({session.id})" if session.title else session.id


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


# --- /compress ---


def _answer(rt: Runtime, held: Held, turn: inbox.TurnRow, session_id: str, reply: str) -> None:
    now = rt.clock()
    with rt.store.write() as conn:
        routes.check_route(conn, held.lease, now, rt.lease_ttl)
        answer_rows(conn, turn, session_id, reply, now)


def _compress(rt: Runtime, held: Held, turn: inbox.TurnRow, session_id: str) -> None:
    try:
        summary = summarise(rt, session_id, held.should_stop)
    except Stopped:
        _answer(rt, held, turn, session_id, "Stopped before compressing.")
        return
    except AuxiliaryUnavailable as exc:
        log.warning("/compress of %s failed: %s", session_id, exc)
        _answer(rt, held, turn, session_id, f"Could not compress this session: {exc}")
        return
    if summary is None:
        _answer(rt, held, turn, session_id, "Nothing to compress yet: this session is short.")
        return
    now = rt.clock()
    with rt.store.write() as conn:
        routes.check_route(conn, held.lease, now, rt.lease_ttl)
        new = continue_session(conn, rt, session_id, summary, session_key=turn.session_key, now=now)
        if new is None:
            reply = "This session has already ended; nothing to compress."
            answer_rows(conn, turn, session_id, reply, now)
        else:
            reply = (
                f"Compressed {plural(summary.messages, 'message')} into a summary. "
                f"Continuing in session {_name(new)}."
            )
            answer_rows(conn, turn, new.id, reply, now)


MODEL_COMMANDS = {"compress": _compress}


def run_model_command(
    rt: Runtime, held: Held, turn: inbox.TurnRow, session_id: str, command: Command
) -> None:
    """A command that calls a model: its thinking is outside any transaction, its answer fenced."""
    MODEL_COMMANDS[command.name](rt, held, turn, session_id)
    deliver_now(rt, outbox.lane_for(turn.platform, turn.chat_id))


# --- /resume, /sessions ---


def viewer_of(turn: inbox.TurnRow) -> Viewer:
    return Viewer(turn.platform, turn.user_id)


def _resume(conn: Connection, rt: Runtime, turn: inbox.TurnRow, session_id: str, args: str) -> str:
    if not args.strip():
        return "Usage: /resume <title, id or id prefix>. /sessions lists your sessions."
    try:
        found = lineage.resolve(conn, args, viewer_of(turn))
    except AmbiguousSession as exc:
        return str(exc)
    except SessionNotFound:
        return f"No session matches '{args.strip()}'. /sessions lists yours."
    target = lineage_head(conn, found)
    if target.id == session_id:
        return f"You are already in session {_name(target)}."
    reopen_session(conn, target.id)
    route_sessions.attach(conn, turn.session_key, target.id, rt.clock())
    drop_if_empty(conn, session_id)
    count = session_rows.require_session(conn, target.id).message_count
    when = _when(target.last_active_at)
    return f"Resumed session {_name(target)}: {plural(count, 'message')}, last active {when}."


def _sessions(
    conn: Connection, rt: Runtime, turn: inbox.TurnRow, session_id: str, args: str
) -> str:
    viewer = viewer_of(turn)
    records, total = recent_sessions(conn, viewer, LISTED)
    if not records:
        return "No saved sessions yet."
    lines = [f"Your sessions (newest first, {min(total, LISTED)} of {total}):"]
    for record in records:
        mark = " ← current" if record.id == session_id else ""
        ended = f", ended ({record.end_reason})" if record.ended_at else ""
        title = record.title or "(untitled)"
        where = f" on {record.source}" if viewer.owner and record.source != turn.platform else ""
        lines.append(
            f"• {title} — {record.id}{where}, {plural(record.message_count, 'message')}, "
            f"{_when(record.last_active_at)}{ended}{mark}"
        )
    lines.append("Resume one with /resume <title or id>.")
    return "\n".join(lines)


HANDLERS: dict[str, Handler] = {  # merged into workers.commands.HANDLERS
    "resume": _resume,
    "sessions": _sessions,
}
