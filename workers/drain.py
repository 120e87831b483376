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

The claim of each next turn is `workers.drain_claim`, a turn's commit `workers.drain_commit`;
names other modules use from either are re-exported here.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from shared.commands import parse_command
from shared.model import MessageRecord, SessionRecord
from shared.pipeline import inbox, leases, outbox, routes
from workers import flush
from workers.agent import compression, titles
from workers.agent.auxiliary import AuxiliaryUnavailable
from workers.agent.base import AgentReply, AgentRequest
from workers.agent.client import Stopped
from workers.commands import agent as agent_commands
from workers.commands import run_command
from workers.drain_claim import HISTORY_MESSAGES as HISTORY_MESSAGES
from workers.drain_claim import Next as _Next
from workers.drain_claim import claim_next as _claim_next
from workers.drain_claim import claim_turn as _claim
from workers.drain_claim import current_session as current_session
from workers.drain_claim import session_context as _context
from workers.drain_claim import take_and_claim as _take_and_claim
from workers.drain_commit import SNAPSHOT_COLUMNS as SNAPSHOT_COLUMNS
from workers.drain_commit import commit_turn as _commit
from workers.drain_commit import reply_address as reply_address
from workers.drain_commit import transcript_text as transcript_text
from workers.renewer import Held
from workers.runtime import Runtime
from workers.stream_edits import streaming
from workers.typing import typing_while

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DrainResult:
    ran: int
    reason: str  # idle | busy | lost | batch | deferred
    retry_in: float | None = None


def drain(rt: Runtime, key: str) -> DrainResult:
    """Run `key`'s waiting turns; returns why it stopped. Safe to call any number of times."""
    lease, first, now = _take_and_claim(rt, key, rt.holder())
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
