"""Compression: the auxiliary model summarises a session; a continuation session carries on.

The continuation names the old session as `parent_session_id`, inherits its routing columns
and model snapshot, starts with the summary (a `system` message, folded into the system
prompt on later turns), and takes the next title of the lineage ("x" → "x #2", provenance
DERIVED). The old session ends with `end_reason` "compression", and the route that carried
the turn points at the continuation — all in the caller's one (fenced) write.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from shared.db import Connection
from shared.ids import new_session_id
from shared.model import SessionRecord
from shared.pipeline import route_sessions
from shared.platforms import gateway_platforms
from shared.store import lineage, messages, usage
from shared.store import sessions as session_rows
from shared.store.sessions import COMPRESSION
from shared.titles import TitleSource
from shared.usage import ModelCall
from workers.agent.auxiliary import Auxiliary, AuxiliaryUnavailable, OfflineAuxiliary
from workers.agent.client import Stopped
from workers.agent.metering import Meter, where
from workers.agent.window import estimate_tokens
from workers.runtime import Runtime

ID_TRIES = 5
MIN_MESSAGES = 2


@dataclass(frozen=True, slots=True)
class Summary:
    text: str
    messages: int  # how many messages it stands for
    calls: list[ModelCall] = field(default_factory=list)  # the summariser's, for the ledger


def auxiliary_of(rt: Runtime) -> Auxiliary:
    """The worker's auxiliary model (the offline heuristics when the agent has none)."""
    aux = getattr(rt.agent, "auxiliary", None)
    return aux if aux is not None else OfflineAuxiliary()


def free_session_id(conn: Connection, now: datetime, *, gateway: bool) -> str:
    """A new id nobody holds (6 random hex digits for terminal sessions can collide)."""
    session_id = new_session_id(now, gateway=gateway)
    for _ in range(ID_TRIES):
        if not session_rows.session_exists(conn, session_id):
            break
        session_id = new_session_id(now, gateway=gateway)
    return session_id


def summarise(rt: Runtime, session_id: str, should_stop: Callable[[], bool]) -> Summary | None:
    """Summarise a session's transcript with no transaction open; None if too short to bother.

    Raises AuxiliaryUnavailable when the auxiliary model cannot do it, Stopped on /stop.
    """
    with rt.store.read() as conn:
        transcript = messages.transcript(conn, session_id)
    said = [m for m in transcript if m.role in ("user", "assistant") and m.content]
    if len(said) < MIN_MESSAGES:
        return None
    if should_stop():
        raise Stopped
    calls: Meter = []
    text = auxiliary_of(rt).summarise(transcript, calls).strip()
    if not text:
        raise AuxiliaryUnavailable("the summary came back empty")
    return Summary(text, len(transcript), calls)


def continue_session(
    conn: Connection,
    rt: Runtime,
    old_id: str,
    summary: Summary,
    *,
    session_key: str,
    now: float,
) -> SessionRecord | None:
    """Inside a fenced write: start the continuation and end `old_id`; None if it already ended.
    The summariser's calls go to the usage ledger either way (they were paid for)."""
    old = session_rows.require_session(conn, old_id)
    usage.record(conn, summary.calls, where(old.source, old.id, old.chat_id), rt.pricing)
    if old.ended_at is not None:
        return None
    new_id = free_session_id(conn, rt.now_datetime(), gateway=old.source in gateway_platforms())
    title = lineage.continuation_title(conn, old.title) if old.title else None
    new = session_rows.create_session(
        conn,
        session_id=new_id,
        source=old.source,
        now=now,
        title=title,
        title_source=TitleSource.DERIVED,
        user_id=old.user_id,
        session_key=old.session_key,
        chat_id=old.chat_id,
        chat_type=old.chat_type,
        thread_id=old.thread_id,
        model=old.model,
        model_config=old.model_config,
        system_prompt=old.system_prompt,
        parent_session_id=old.id,
    )
    text = (
        f"Summary of the conversation so far (compressed from session {old.id}, "
        f"{summary.messages} messages):\n{summary.text}"
    )
    tokens = estimate_tokens(text)
    messages.append_message(conn, new_id, "system", text, now=now, token_count=tokens)
    session_rows.end_session(conn, old.id, COMPRESSION, now)
    route_sessions.move_session(conn, session_key, old.id, new_id, now)
    return session_rows.require_session(conn, new.id)
