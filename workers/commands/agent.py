"""Agent commands: /compress, /resume <name>, /sessions.

/compress calls the auxiliary model, so it runs in two steps like a turn: the summary with no
transaction open, then the continuation, the answer and the turn's status in one fenced write
(`run_model_command`; the drain sends MODEL_COMMANDS there instead of to `run_command`).

/resume and /sessions only reach sessions the requester may see (workers.agent.visibility):
in the terminal, every terminal session; on a gateway platform, the sender's own sessions on
that platform. /resume points this chat's route at the session (the newest of its
compression lineage), reopening it if /new or /reset had ended it.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from sqlalchemy import Connection, delete, func, select, update

from shared.commands import Command
from shared.model import SessionRecord
from shared.store import inbox, leases, outbox
from shared.store import sessions as session_rows
from shared.store.resume import lineage_head, reopen_session
from shared.store.schema import routes, sessions
from shared.titles import TitleError, validate_title
from workers.agent.auxiliary import AuxiliaryUnavailable
from workers.agent.client import Stopped
from workers.agent.compression import continue_session, summarise
from workers.agent.visibility import may_see, visible_clause
from workers.commands.base import Handler, answer_rows
from workers.deliver import deliver_now
from workers.renewer import Held
from workers.runtime import Runtime

log = logging.getLogger(__name__)

LISTED = 10
SHOWN_CHOICES = 5


def _name(session: SessionRecord) -> str:
    return f"'{session.title}' ({session.id})" if session.title else session.id


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


# --- /compress ---


def _answer(rt: Runtime, held: Held, turn: inbox.TurnRow, session_id: str, reply: str) -> None:
    now = rt.clock()
    with rt.store.write() as conn:
        leases.check_route(conn, held.lease, now, rt.lease_ttl)
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
        leases.check_route(conn, held.lease, now, rt.lease_ttl)
        new = continue_session(conn, rt, session_id, summary, session_key=turn.session_key, now=now)
        if new is None:
            reply = "This session has already ended; nothing to compress."
            answer_rows(conn, turn, session_id, reply, now)
        else:
            reply = (
                f"Compressed {summary.messages} messages into a summary. "
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


def _like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def find_visible(conn: Connection, turn: inbox.TurnRow, ref: str) -> SessionRecord | str:
    """The session `ref` names among those the requester may see, or why there is none.

    An exact id, then a unique id prefix, then a title (the newest of its lineage).
    """
    ref = ref.strip()
    seen = visible_clause(turn.platform, turn.user_id)
    exact = conn.execute(select(sessions).where(sessions.c.id == ref, seen)).first()
    if exact is not None:
        return SessionRecord.from_row(exact)
    ids = (
        conn.execute(
            select(sessions.c.id)
            .where(sessions.c.id.like(_like(ref), escape="\\"), seen)
            .order_by(sessions.c.id.desc())
            .limit(SHOWN_CHOICES + 1)
        )
        .scalars()
        .all()
    )
    if len(ids) == 1:
        return session_rows.require_session(conn, ids[0])
    if len(ids) > 1:
        return (
            f"'{ref}' matches several sessions ({', '.join(ids[:SHOWN_CHOICES])}…); be more exact."
        )
    try:
        title = validate_title(ref)
    except TitleError:
        return f"No session matches '{ref}'."
    members = _visible_lineage(conn, turn, title)
    if not members:  # case-blind, as `hermes -r TITLE` is
        folded = conn.execute(
            select(sessions.c.title)
            .where(func.lower(sessions.c.title) == title.lower(), seen)
            .limit(1)
        ).scalar()
        members = _visible_lineage(conn, turn, str(folded)) if folded else []
    if not members:
        return f"No session matches '{ref}'. /sessions lists yours."
    newest = max(members, key=lambda m: m[2])
    return session_rows.require_session(conn, newest[1])


def _visible_lineage(
    conn: Connection, turn: inbox.TurnRow, title: str
) -> list[tuple[str, str, float]]:
    return [
        m
        for m in session_rows.lineage_titles(conn, title)
        if may_see(turn.platform, turn.user_id, session_rows.require_session(conn, m[1]))
    ]


def _drop_if_unused(conn: Connection, session_id: str) -> None:
    """The empty, untitled session made just to run this command is not kept."""
    session = session_rows.get_session(conn, session_id)
    if session is not None and session.message_count == 0 and session.title is None:
        conn.execute(delete(sessions).where(sessions.c.id == session_id))


def _resume(conn: Connection, rt: Runtime, turn: inbox.TurnRow, session_id: str, args: str) -> str:
    if not args.strip():
        return "Usage: /resume <title, id or id prefix>. /sessions lists your sessions."
    found = find_visible(conn, turn, args)
    if isinstance(found, str):
        return found
    target = lineage_head(conn, found)
    if target.id == session_id:
        return f"You are already in session {_name(target)}."
    reopen_session(conn, target.id)
    conn.execute(
        update(routes)
        .where(routes.c.session_key == turn.session_key)
        .values(session_id=target.id, pending_title=None, updated_at=rt.clock())
    )
    _drop_if_unused(conn, session_id)
    count = session_rows.require_session(conn, target.id).message_count
    when = _when(target.last_active_at)
    return f"Resumed session {_name(target)}: {count} messages, last active {when}."


def _sessions(
    conn: Connection, rt: Runtime, turn: inbox.TurnRow, session_id: str, args: str
) -> str:
    seen = visible_clause(turn.platform, turn.user_id)
    rows = conn.execute(
        select(sessions)
        .where(seen, sessions.c.message_count > 0)
        .order_by(sessions.c.last_active_at.desc(), sessions.c.id.desc())
        .limit(LISTED)
    ).all()
    total = conn.execute(
        select(func.count()).where(seen, sessions.c.message_count > 0)
    ).scalar_one()
    if not rows:
        return "No saved sessions yet."
    lines = [f"Your sessions (newest first, {min(total, LISTED)} of {total}):"]
    for row in rows:
        record = SessionRecord.from_row(row)
        mark = " ← current" if record.id == session_id else ""
        ended = f", ended ({record.end_reason})" if record.ended_at else ""
        title = record.title or "(untitled)"
        lines.append(
            f"• {title} — {record.id}, {record.message_count} messages, "
            f"{_when(record.last_active_at)}{ended}{mark}"
        )
    lines.append("Resume one with /resume <title or id>.")
    return "\n".join(lines)


HANDLERS: dict[str, Handler] = {  # merged into workers.commands.HANDLERS
    "resume": _resume,
    "sessions": _sessions,
}
