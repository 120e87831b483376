"""Draining one session key: its turns in arrival order, under the key's lease, exactly once.

The lease's fence is re-checked in every write transaction, so a worker that lost the lease
(paused past its expiry, cut off) commits nothing. The model is called with no transaction
open while the process's renewer keeps the lease alive. A drain runs a bounded batch and then
re-wakes itself.

Each write transaction also claims what comes next: taking the lease claims the first turn,
and a turn's outcome commits together with the claim of the following one. When there is
nothing left the lease is released in that same transaction; writers are serialised (BEGIN
IMMEDIATE; on Postgres the route row, which every arrival updates, is locked by the fence
check), so a turn recorded after it sees the lease free when its own wake-up runs, and a turn
recorded before it is seen. No turn is stranded behind a lease being let go.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from shared.commands import parse_command
from shared.db import Connection
from shared.db.errors import TitleInUse
from shared.ids import CLI_HEX, looks_like_session_id
from shared.model import MessageRecord, SessionRecord
from shared.pipeline import cron, inbox, leases, outbox, routes
from shared.platforms import CLI, CRON, gateway_platforms
from shared.store import chats, messages, usage
from shared.store import memory as memory_rows
from shared.store import sessions as session_rows
from shared.store.housekeeping import MEMORY_FLUSH
from shared.store.resume import runs_in_left_session
from shared.titles import TitleError
from workers import flush
from workers.agent import compression, metering, titles
from workers.agent.auxiliary import AuxiliaryUnavailable
from workers.agent.base import AgentReply, AgentRequest
from workers.agent.client import Stopped
from workers.commands import agent as agent_commands
from workers.commands import run_command
from workers.renewer import Held
from workers.runtime import Runtime
from workers.stream_edits import streaming
from workers.typing import typing_while

log = logging.getLogger(__name__)

HISTORY_MESSAGES = 200


@dataclass(frozen=True, slots=True)
class DrainResult:
    ran: int
    reason: str  # idle | busy | lost | batch | deferred
    retry_in: float | None = None


@dataclass(frozen=True, slots=True)
class _Next:
    """What a write transaction found next in the key's line."""

    action: str  # run (marked running) | bury | defer | idle (lease released)
    turn: inbox.TurnRow | None = None
    session_id: str | None = None
    started: float = 0.0
    retry_in: float | None = None
    # The session and its recent history, when the claim's write read them (see _claim).
    context: tuple[SessionRecord, list[MessageRecord]] | None = None


_Opened = tuple[str, flush.Opened]  # a reply lane, opened in the turn's write


def drain(rt: Runtime, key: str) -> DrainResult:
    """Run `key`'s waiting turns; returns why it stopped. Safe to call any number of times."""
    holder = rt.holder()

    def take(conn: Connection) -> tuple[leases.Lease | None, _Next | None, float]:
        now = rt.clock()
        lease = routes.acquire_route(conn, key, holder, now, rt.lease_ttl)
        return lease, _claim(conn, rt, lease, now) if lease is not None else None, now

    lease, first, now = rt.store.commit(take)
    if lease is None or first is None:
        return DrainResult(0, "busy")
    if first.action == "idle":  # a duplicate wake-up: the lease is already let go
        return DrainResult(0, "idle")
    result: DrainResult | None = None
    rt.metrics.leases_held.inc()
    try:
        with rt.renewer.hold(lease, first.started or now) as held:
            result = _run_batch(rt, held, first, budget=rt.settings.pipeline.batch_turns)
    finally:
        rt.metrics.leases_held.dec()
        if result is None or result.reason != "idle":  # idle: released with the last claim
            rt.store.commit(lambda conn: routes.release_route(conn, lease))
        if result is None:  # an unexpected error: turns that arrived meanwhile got no wake-up
            _wake_after_error(rt, key)
    assert result is not None
    if result.reason == "deferred":
        rt.waker.drain(key, countdown=result.retry_in)
    elif result.reason == "batch":
        rt.waker.drain(key)
    return result


def _wake_after_error(rt: Runtime, key: str) -> None:
    """Wake the key again after the retry backoff (the failed turn's attempts bound how often);
    without this, turns accepted while the lease was held would wait for the redrive sweep."""
    try:
        rt.waker.drain(key, countdown=rt.settings.pipeline.retry_backoff_seconds)
    except Exception:  # the redrive sweep still finds the work
        log.exception("could not re-wake %s after a failed drain", key)


@dataclass(frozen=True, slots=True)
class _Finished:
    """The outcome of the turn a write finishes before it claims the next one."""

    turn_id: int
    status: str
    error: str | None = None


def _claim(
    conn: Connection,
    rt: Runtime,
    lease: leases.Lease,
    now: float,
    finished: _Finished | None = None,
) -> _Next:
    """Inside a fenced write: finish `finished` if given, then mark the key's next turn running,
    or release the lease if none."""
    # The next turn and (on PostgreSQL) its route's session state, read in one statement; with
    # `finished`, finishing, searching and (none open) releasing are one round trip there.
    if finished is None:
        turn, route = inbox.next_turn_and_route(conn, lease.name)
        released = False
    else:
        turn, route = inbox.finish_and_next(
            conn, finished.turn_id, finished.status, now, finished.error, lease
        )
        released = turn is None
    while turn is not None and turn.kind == MEMORY_FLUSH and not _flush_still_wanted(conn, turn):
        moved_on = "session already moved on"
        turn, route = inbox.finish_and_next(conn, turn.id, inbox.CANCELLED, now, moved_on, lease)
        released = turn is None
    if turn is None:
        if not released:
            routes.release_route(conn, lease)
        return _Next("idle")
    if turn.not_before is not None and turn.not_before > now:
        return _Next("defer", turn, retry_in=turn.not_before - now)
    if turn.attempts >= rt.settings.pipeline.max_attempts:
        return _Next("bury", turn)
    session_id = current_session(conn, rt, turn, route)
    inbox.mark_running(conn, turn.id, session_id, now)
    # On PostgreSQL the model's context is read here, two statements in this transaction, not
    # in a read transaction of its own after it (BEGIN, the two, COMMIT: four round trips). On
    # SQLite a read of its own costs no round trip, and here it would hold the one write lock.
    context = None
    if turn.kind != "command" and conn.dialect.name == "postgresql":
        context = _context(conn, session_id)
    return _Next("run", turn, session_id, started=now, context=context)


def _context(conn: Connection, session_id: str) -> tuple[SessionRecord, list[MessageRecord]]:
    """What the model is given of the session: its record and its last HISTORY_MESSAGES."""
    session = session_rows.require_session(conn, session_id)
    return session, messages.last_messages(conn, session_id, HISTORY_MESSAGES)


def _flush_still_wanted(conn: Connection, turn: inbox.TurnRow) -> bool:
    """A reset's memory turn runs only in the live session it was queued for."""
    session_id = turn.flush_session_id
    if session_id is None or routes.route_session_id(conn, turn.session_key) != session_id:
        return False
    record = session_rows.get_session(conn, session_id)
    return record is not None and record.ended_at is None


def _claim_next(rt: Runtime, held: Held) -> _Next:
    def claim(conn: Connection) -> _Next:
        now = rt.clock()
        routes.check_route(conn, held.lease, now, rt.lease_ttl)
        return _claim(conn, rt, held.lease, now)

    return rt.store.commit(claim)


def _run_batch(rt: Runtime, held: Held, step: _Next, budget: int) -> DrainResult:
    ran = 0
    while True:
        if step.action == "idle":
            return DrainResult(ran, "idle")
        if step.action == "defer":
            return DrainResult(ran, "deferred", retry_in=step.retry_in)
        if held.lost:
            return DrainResult(ran, "lost")
        assert step.turn is not None
        more = ran + 1 < budget
        try:
            if step.action == "bury":
                _bury(rt, held, step.turn)
                following = _claim_next(rt, held) if more else None
            else:
                assert step.session_id is not None
                rt.renewer.restart_clock(held, step.started)
                following = _run_turn(
                    rt, held, step.turn, step.session_id, claim=more, context=step.context
                )
                rt.metrics.turn_timed(
                    step.turn.platform, step.turn.received_at, step.started, rt.clock()
                )
        except leases.LeaseLost:
            log.warning("drain of %s fenced out; another worker has it", held.lease.name)
            return DrainResult(ran, "lost")
        ran += 1
        if following is None:
            return DrainResult(ran, "batch")
        step = following


def _bury(rt: Runtime, held: Held, turn: inbox.TurnRow) -> None:
    """A turn that failed `max_attempts` times: mark it dead, tell the user, move on."""
    now = rt.clock()
    with rt.store.write() as conn:
        routes.check_route(conn, held.lease, now, rt.lease_ttl)
        inbox.finish_turn(conn, turn.id, inbox.DEAD, now, error=turn.error or "worker lost")
        outbox.add(
            conn,
            platform=turn.platform,
            chat_id=turn.chat_id,
            thread_id=turn.thread_id,
            reply_to=turn.message_id,
            turn_id=turn.id,
            session_id=turn.session_id,
            text="Sorry — I could not process that message after several attempts. "
            "It has been reported; please try again or rephrase.",
            now=now,
        )
    rt.metrics.turns.labels(turn.platform, inbox.DEAD).inc()
    log.error(
        "turn %s (%s seq %s) is dead after %s attempts: %s",
        turn.id,
        turn.session_key,
        turn.seq,
        turn.attempts,
        turn.error,
    )
    flush.deliver_now(rt, outbox.lane_for(turn.platform, turn.chat_id))


def current_session(
    conn: Connection, rt: Runtime, turn: inbox.TurnRow, route: Any | None = None
) -> str:
    """The key's live session, created on first need (the lease makes this single-flight).
    A terminal's session that was left still takes the turns sent to it (`resume`). `route`:
    the key's `routes.session_state` if this transaction has read it already."""
    if route is None:
        route = routes.session_state(conn, turn.session_key)
    assert route is not None  # the turn's arrival made the route row
    live = route["live_id"]
    if live is not None and (
        route["ended_at"] is None
        or runs_in_left_session(
            conn, live, route["end_reason"], route["ended_at"], turn.received_at
        )
    ):
        return str(live)
    now = rt.clock()
    session_id = _terminal_id(conn, turn) or compression.free_session_id(
        conn, rt.now_datetime(), gateway=turn.platform in gateway_platforms()
    )
    columns: dict[str, Any] = {
        "user_id": turn.user_id,
        "session_key": turn.session_key,
        "chat_id": turn.chat_id,
        "chat_type": turn.chat_type,
        "thread_id": turn.thread_id,
        "model": rt.settings.model.name,
    }
    try:
        session_rows.create_session(
            conn,
            session_id=session_id,
            source=turn.platform,
            now=now,
            title=route["pending_title"],
            **columns,
        )
    except (TitleInUse, TitleError):
        session_rows.create_session(
            conn, session_id=session_id, source=turn.platform, now=now, **columns
        )
    routes.attach(conn, turn.session_key, session_id, now)
    return session_id


def _terminal_id(conn: Connection, turn: inbox.TurnRow) -> str | None:
    """A terminal names its chat after the session it starts: use that id while it is free."""
    chat = turn.chat_id
    if (
        turn.platform != CLI
        or not looks_like_session_id(chat)
        or len(chat.rsplit("_", 1)[1]) != CLI_HEX
    ):
        return None
    return None if session_rows.session_exists(conn, chat) else chat


def _run_turn(
    rt: Runtime,
    held: Held,
    turn: inbox.TurnRow,
    session_id: str,
    *,
    claim: bool,
    context: tuple[SessionRecord, list[MessageRecord]] | None = None,
) -> _Next | None:
    """Run a claimed turn; returns the next claim (None when `claim` is False: batch done).
    `context`: the session and its history if the claim read them."""
    command = parse_command(turn.text) if turn.kind == "command" else None
    if command is not None:
        if command.name in agent_commands.MODEL_COMMANDS:
            agent_commands.run_model_command(rt, held, turn, session_id, command)
        else:
            run_command(rt, held, turn, session_id, command)
        return _claim_next(rt, held) if claim else None
    if context is None:
        with rt.store.read() as conn:
            context = _context(conn, session_id)
    session, history = context
    try:
        with typing_while(rt.senders, turn), streaming(rt, turn) as live:
            reply = rt.agent.respond(
                AgentRequest(
                    session=session,
                    history=history,
                    turn=turn,
                    should_stop=held.should_stop,
                    live=live,
                )
            )
    except Exception as exc:
        _postpone(rt, held, turn, exc)
        return _claim_next(rt, held) if claim else None
    if held.lost:
        raise leases.LeaseLost(held.lease.name)
    # The model snapshot is written only when it changed, not on every turn.
    changed = {k: v for k, v in reply.session_updates.items() if getattr(session, k, None) != v}
    if changed != reply.session_updates:
        reply = dataclasses.replace(reply, session_updates=changed)
    compressing = reply.compress and reply.failed is None and not reply.stopped
    title_task, title = False, None
    if _first_exchange(session, history, reply):
        users = [m.content for m in history if m.role == "user" and m.content]
        inline, title = titles.offline_now(rt, [*users, turn.text])
        title_task = not inline
    following = _commit(
        rt, held, turn, session_id, reply, claim=claim and not compressing, title=title
    )
    if title_task:
        rt.waker.autotitle(session_id)
    if compressing:
        return _compress(rt, held, turn, session_id, claim=claim)
    return following


def _first_exchange(
    session: SessionRecord, history: list[MessageRecord], reply: AgentReply
) -> bool:
    """The session's first answered exchange just committed, and it has no title yet."""
    if reply.failed is not None or reply.stopped or session.title is not None:
        return False
    answered = any(m.role == "assistant" and m.content for m in reply.messages)
    return answered and not any(m.role == "assistant" for m in history)


def _compress(
    rt: Runtime, held: Held, turn: inbox.TurnRow, session_id: str, *, claim: bool
) -> _Next | None:
    """After a turn near the context budget: summarise (no transaction open), then continue the
    session in a new one and claim the next turn in one fenced write."""
    summary = None
    try:
        summary = compression.summarise(rt, session_id, held.should_stop)
    except (AuxiliaryUnavailable, Stopped) as exc:  # the next turn tries again
        log.warning("compression of %s skipped: %s", session_id, exc)
    if held.lost:
        raise leases.LeaseLost(held.lease.name)
    if summary is None and not claim:
        return None
    with rt.store.write() as conn:
        now = rt.clock()
        routes.check_route(conn, held.lease, now, rt.lease_ttl)
        if summary is not None:
            compression.continue_session(
                conn, rt, session_id, summary, session_key=turn.session_key, now=now
            )
        return _claim(conn, rt, held.lease, now) if claim else None


def _postpone(rt: Runtime, held: Held, turn: inbox.TurnRow, exc: Exception) -> None:
    now = rt.clock()
    backoff = rt.settings.pipeline.retry_backoff_seconds * (turn.attempts + 1)
    log.warning("turn %s attempt %s failed: %r", turn.id, turn.attempts + 1, exc)
    rt.metrics.turns.labels(turn.platform, "retried").inc()
    with rt.store.write() as conn:
        routes.check_route(conn, held.lease, now, rt.lease_ttl)
        inbox.postpone_turn(conn, turn.id, now + backoff, f"{type(exc).__name__}: {exc}"[:500])


def transcript_text(turn: inbox.TurnRow) -> str:
    """In a shared room the transcript says who spoke."""
    return f"[{turn.user_name}] {turn.text}" if turn.user_name else turn.text


def _commit(
    rt: Runtime,
    held: Held,
    turn: inbox.TurnRow,
    session_id: str,
    reply: AgentReply,
    *,
    claim: bool,
    title: str | None = None,
) -> _Next | None:
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

    def write(conn: Connection) -> tuple[_Next | None, outbox.OutboxRow | None, _Opened | None]:
        routes.check_route(conn, held.lease, now, rt.lease_ttl)
        messages.append_messages(
            conn,
            session_id,
            rows,
            input_tokens=reply.input_tokens,
            output_tokens=reply.output_tokens,
        )
        address = reply_address(conn, rt, turn)
        # A terminal reads its replies from here: this commit delivers them, no lane to open.
        in_store = address is not None and flush.reads_store(rt, address[0])
        last: outbox.OutboxRow | None = None
        for text in reply.replies:
            if address is None:
                break
            last = outbox.add(
                conn,
                platform=address[0],
                chat_id=address[1],
                thread_id=address[2],
                reply_to=turn.message_id if address[0] == turn.platform else None,
                turn_id=turn.id,
                session_id=session_id,
                text=text,
                now=now,
                delivered=in_store,
            )
        _record_side_effects(conn, turn, session_id, reply, now)
        if title is not None:
            titles.write_auto_title(conn, session_id, title)
        error = reply.failed[:500] if reply.failed is not None else None
        following = None
        if claim:
            following = _claim(conn, rt, held.lease, now, _Finished(turn.id, status, error))
        else:
            inbox.finish_turn(conn, turn.id, status, now, error=error)
        opened = None
        if last is not None and not in_store:
            opened = (last.lane, flush.open_lane(conn, holder, last.lane, now, flush.lane_ttl(rt)))
        # Last: a rollup row other sessions' turns add to stays locked until this commit.
        where = metering.where(turn.platform, session_id, turn.chat_id, turn.id)
        usage.record(conn, reply.calls, where, rt.pricing)
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
