"""Committing a turn's outcome in one fenced write: its messages, its replies (and the lane
that delivers them), the model snapshot and memory changes, an offline title, its usage, and the
claim of the key's next turn (`workers.drain_claim`).
"""

from __future__ import annotations

import dataclasses
import logging

from shared.db import Connection
from shared.pipeline import cron, inbox, outbox, routes
from shared.platforms import CRON
from shared.store import chats, messages, usage
from shared.store import memory as memory_rows
from shared.store import sessions as session_rows
from shared.store.housekeeping import MEMORY_FLUSH
from workers import flush
from workers.agent import metering, titles
from workers.agent.base import AgentReply
from workers.drain_claim import Finished, Next, claim_turn
from workers.renewer import Held
from workers.runtime import Runtime

log = logging.getLogger(__name__)

_Opened = tuple[str, flush.Opened]  # a reply lane, opened in the turn's write


def transcript_text(turn: inbox.TurnRow) -> str:
    """In a shared room the transcript says who spoke."""
    return f"[{turn.user_name}] {turn.text}" if turn.user_name else turn.text


def commit_turn(
    rt: Runtime,
    held: Held,
    turn: inbox.TurnRow,
    session_id: str,
    reply: AgentReply,
    *,
    claim: bool,
    title: str | None = None,
) -> Next | None:
    """The turn's outcome, its messages, its replies, an offline auto-title and the next claim:
    one fenced write."""
    now = rt.clock()
    user_text = transcript_text(turn)
    if reply.user_extra:
        user_text = f"{user_text}\n\n{reply.user_extra}" if user_text.strip() else reply.user_extra
    silent = turn.kind == MEMORY_FLUSH  # a reset's memory turn leaves no trace but memories
    if silent:
        reply = dataclasses.replace(reply, replies=[])
    rows = (
        []
        if silent
        else [
            messages.NewRow(
                "user",
                user_text,
                turn.received_at,
                token_count=reply.user_token_count,
                platform_message_id=turn.message_id,
            ),
            *(
                messages.NewRow(
                    m.role,
                    m.content,
                    now,
                    tool_calls=m.tool_calls,
                    tool_call_id=m.tool_call_id,
                    tool_name=m.tool_name,
                    token_count=m.token_count,
                )
                for m in reply.messages
            ),
        ]
    )
    status = inbox.CANCELLED if reply.stopped else inbox.DONE
    if reply.failed is not None:  # the apology is sent; the turn is not retried
        status = inbox.FAILED
    holder = rt.holder()
    where = metering.where(turn.platform, session_id, turn.chat_id, turn.id)

    def write(conn: Connection) -> tuple[Next | None, outbox.OutboxRow | None, _Opened | None]:
        # Where the replies go: a cron run's target is looked up in the store, after the fence
        # check; any other turn's is its own chat, known now, so its first reply is written
        # with its messages (on PostgreSQL in the same statement: no round trip of its own).
        address = None if turn.platform == CRON else reply_address(conn, rt, turn)
        replies = _replies(rt, turn, session_id, reply.replies, address, now)
        last = messages.append_messages(  # first: the lease's fence check is part of it
            conn,
            session_id,
            rows,
            input_tokens=reply.input_tokens,
            output_tokens=reply.output_tokens,
            fence=routes.Fence(held.lease, now, rt.lease_ttl),
            reply=replies.pop(0) if replies else None,
        )
        if turn.platform == CRON:
            address = reply_address(conn, rt, turn)
            replies = _replies(rt, turn, session_id, reply.replies, address, now)
        for each in replies:  # the rest, in order after it
            last = each.add(conn)
        # A terminal reads its replies from here: this commit delivers them, no lane to open.
        in_store = address is not None and flush.reads_store(rt, address[0])
        _record_side_effects(conn, turn, session_id, reply, now)
        if title is not None:
            titles.write_auto_title(conn, session_id, title)
        error = reply.failed[:500] if reply.failed is not None else None
        opened = None
        if last is not None and not in_store:
            opened = (last.lane, flush.open_lane(conn, holder, last.lane, now, flush.lane_ttl(rt)))
        # Last of the turn's writes, with its finish (one statement on PostgreSQL): a rollup row
        # other sessions' turns add to stays locked until this commit. Only the claim of a next
        # turn in this batch may follow.
        finished = Finished(turn.id, status, error, usage.rows_of(reply.calls, where, rt.pricing))
        following = _finish(conn, rt, held, finished, now, claim=claim)
        if opened is not None:
            return following, None, opened
        return following, last, None

    following, delivered, opened = rt.store.commit(write)
    rt.metrics.turn_committed(turn.platform, status, reply.calls)
    if delivered is not None:
        flush.nudge(rt, delivered)  # once: the reader takes all of the turn's replies
    if opened is not None:
        flush.deliver_now(rt, *opened)
    return following


def _replies(
    rt: Runtime,
    turn: inbox.TurnRow,
    session_id: str,
    texts: list[str],
    address: tuple[str, str, str | None] | None,
    now: float,
) -> list[outbox.Reply]:
    """The turn's replies as the outbox writes them, in order (none without an address). A
    terminal reads its replies from the store: their commit delivers them."""
    if address is None:
        return []
    platform, chat_id, thread_id = address
    in_store = flush.reads_store(rt, platform)
    return [
        outbox.Reply(
            platform=platform,
            chat_id=chat_id,
            thread_id=thread_id,
            reply_to=turn.message_id if platform == turn.platform else None,
            turn_id=turn.id,
            session_id=session_id,
            text=text,
            now=now,
            delivered=in_store,
        )
        for text in texts
    ]


def _finish(
    conn: Connection, rt: Runtime, held: Held, finished: Finished, now: float, *, claim: bool
) -> Next | None:
    """The turn's status and usage rows, and with `claim` the claim of the key's next turn."""
    if claim:
        return claim_turn(conn, rt, held.lease, now, finished)
    inbox.finish_turn(conn, finished.turn_id, finished.status, now, error=finished.error)
    if finished.used is not None:
        finished.used.write(conn)
    return None


def reply_address(
    conn: Connection, rt: Runtime, turn: inbox.TurnRow
) -> tuple[str, str, str | None] | None:
    """Where a turn's replies go: back to its chat; a cron run's to the job's target (the given
    chat, else the platform's home channel). None: the reply stays in the transcript only."""
    if turn.platform != CRON:
        return turn.platform, turn.chat_id, turn.thread_id
    job = cron.find_job(conn, turn.chat_id)
    if job is None or job.deliver_platform is None:
        return None
    if job.deliver_chat:
        return job.deliver_platform, job.deliver_chat, None
    configured = getattr(rt.settings.platforms, job.deliver_platform, None)
    home = chats.get_home_channel(
        conn,
        job.deliver_platform,
        configured=configured.home_channel if configured is not None else None,
    )
    if home is None:
        log.warning(
            "cron job %s: %s has no home channel; reply kept in its session",
            job.name,
            job.deliver_platform,
        )
        return None
    return job.deliver_platform, home.chat_id, home.thread_id


SNAPSHOT_COLUMNS = ("model", "model_config", "system_prompt")


def _record_side_effects(
    conn: Connection, turn: inbox.TurnRow, session_id: str, reply: AgentReply, now: float
) -> None:
    """What the agent asked to keep besides messages: the model snapshot, memory changes."""
    snapshot = {k: v for k, v in reply.session_updates.items() if k in SNAPSHOT_COLUMNS}
    if snapshot:
        session_rows.record_model(conn, session_id, **snapshot)
    if reply.memory_ops:
        owner = memory_rows.owner_for(turn.platform, turn.user_id, turn.chat_id)
        memory_rows.apply(conn, owner, reply.memory_ops, now=now, session_id=session_id)
