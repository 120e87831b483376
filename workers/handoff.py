"""Running a `/handoff <platform>` request (DESIGN.md §4), on whichever worker claims it.

The request row is claimed once (pending → running); then, in the platform's home channel:
a note saying the session continues there is written and sent at once through the platform's
sender (so a 403 or a rate limit fails the handoff with the platform's reason instead of
claiming success); the home channel's conversation key is bound to the terminal's session
(same id, same transcript); and a synthetic turn asks the agent to acknowledge and summarise,
answered through the ordinary pipeline. The handoff is then completed.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass, replace

import psutil

from shared.db import Store
from shared.pipeline import inbox, outbox, route_sessions, routes
from shared.platforms import DM
from shared.ports import Clock
from shared.session_key import SessionKey, key_part, room_key
from shared.store import chats, handoffs
from shared.store import sessions as session_rows
from shared.turns import InboundTurn
from workers.commands.platform import home_channel, home_key
from workers.delivery.base import ThreadOpener, ThreadUnavailable
from workers.drain import drain
from workers.flush import flush
from workers.runtime import Runtime

log = logging.getLogger(__name__)

SUMMARY_PROMPT = (
    "[This conversation was just handed off from the terminal to {platform}. "
    "Acknowledge the handoff in one line, then summarise briefly where things stand.]"
)
RUNNING = handoffs.RUNNING
STALE_SECONDS = 300.0  # a handoff takes seconds; one running this long lost its worker
RESTARTED = "the gateway worker restarted while the handoff ran; run /handoff again"


@dataclass(frozen=True, slots=True)
class HandoffResult:
    outcome: str  # missing | skipped | completed | failed
    error: str | None = None


def run_handoff(rt: Runtime, handoff_id: int) -> HandoffResult:
    now = rt.clock()
    with rt.store.write() as conn:
        found = handoffs.get(conn, handoff_id)
        if found is None:
            return HandoffResult("missing")  # not committed yet: the task tries again
        if not handoffs.claim(conn, handoff_id, now, claimer()):
            return HandoffResult("skipped")  # another worker has it, or it is over
    try:
        error = _deliver(rt, found)
    except Exception as exc:  # never leave it running: a later worker would fail it anyway
        log.exception("handoff %s failed", handoff_id)
        error = f"{type(exc).__name__}: {exc}"
    with rt.store.write() as conn:
        if error is None:
            handoffs.complete(conn, handoff_id, rt.clock())
            return HandoffResult("completed")
        handoffs.fail(conn, handoff_id, error, rt.clock())
    return HandoffResult("failed", error)


def _deliver(rt: Runtime, request: handoffs.Handoff) -> str | None:
    """Do the handoff; the reason it failed, or None."""
    platform = request.platform
    if platform not in rt.senders.platforms():
        return f"{platform} is not configured on the worker that took the handoff"
    with rt.store.read() as conn:
        home = home_channel(conn, rt, platform)
        session = session_rows.require_session(conn, request.session_id)
    if home is None:
        return f"{platform} has no home channel: send /sethome in the chat you want there"
    name = f"'{session.title}'" if session.title else session.id
    home = _in_thread(rt, home, session.title or f"hermes {session.id}")
    key = home_key(rt, home)
    if key is None:
        return f"the {platform} home channel comes from the settings; send /sethome in it once"
    note = f"↻ Continuing session {name} from the terminal. Reply here to carry on."
    with rt.store.write() as conn:
        row = outbox.add(
            conn,
            platform=home.platform,
            chat_id=home.chat_id,
            thread_id=home.thread_id,
            session_id=request.session_id,
            text=note,
            now=rt.clock(),
        )
    flush(rt, row.lane)
    with rt.store.read() as conn:
        sent = outbox.get_row(conn, row.id)
    if sent is None or sent.status != outbox.SENT:
        reason = sent.error if sent is not None and sent.error else "the message was not sent"
        with rt.store.write() as conn:
            if sent is not None and sent.status == outbox.PENDING:
                outbox.mark_failed(conn, row.id, reason, rt.clock())  # never sent later
        return f"{platform} refused the message: {reason}"
    bound = _bind(rt, request, home, key)
    # Answer the summary turn here, so its reply is delivered before the terminal lets go; a
    # drain already holding the key (someone wrote there meanwhile) answers it instead.
    if drain(rt, bound.key).reason == "busy":
        rt.waker.drain(bound.key)
        return None
    with rt.store.read() as conn:
        turn = inbox.get_turn(conn, bound.turn_id)
        replies = outbox.for_turn(conn, bound.turn_id)
    unsent = [r for r in replies if r.status == outbox.FAILED]
    if unsent:  # give the key back, so the terminal's retry starts from where it was
        with rt.store.write() as conn:
            route_sessions.unbind_route(
                conn, bound.key, request.session_id, bound.previous, rt.clock()
            )
        return f"{platform} refused the summary: {unsent[0].error or 'unknown error'}"
    if turn is not None and turn.status in (inbox.FAILED, inbox.DEAD):
        log.warning("handoff %s: the summary turn failed: %s", request.id, turn.error)
    return None


@dataclass(frozen=True, slots=True)
class _Bound:
    key: str
    previous: str | None  # the session the key pointed at before
    turn_id: int  # the synthetic summary turn


def _bind(rt: Runtime, request: handoffs.Handoff, home: chats.HomeChannel, key: str) -> _Bound:
    """Bind the target key to the session and record the summary turn there.

    In a group channel without a thread (none could be opened), the target is the room's key
    rather than the /sethome user's, marked shared: then everyone authorised in the room
    continues the session, as in a thread (producers/intake.py `in_shared_room`)."""
    room = room_key(key, home.user_id) if home.chat_type != DM and not home.thread_id else None
    target = room or key
    user_id = None if room else home.user_id
    place = routes.Place(home.platform, home.chat_id, home.chat_type, home.thread_id, user_id)
    probe = InboundTurn(
        platform=home.platform,
        chat_id=home.chat_id,
        chat_type=home.chat_type,
        event_id=f"handoff:{request.id}",
        text=SUMMARY_PROMPT.format(platform=request.platform),
        user_id=home.user_id,
        thread_id=home.thread_id,
    )
    with rt.store.write() as conn:
        now = rt.clock()
        previous = route_sessions.route_session_id(conn, target)
        route_sessions.bind_route(conn, target, request.session_id, place, now)
        if room is not None:
            route_sessions.share_room(conn, room, request.id)
        handoffs.set_target(conn, request.id, home.chat_id, home.thread_id, target)
        shared = home.chat_type != DM and not target.endswith(f":{key_part(home.user_id or '')}")
        summary = inbox.record_turn(conn, probe, SessionKey(target, shared=shared), now=now)
    return _Bound(target, previous, summary.turn_id)


def _in_thread(rt: Runtime, home: chats.HomeChannel, title: str) -> chats.HomeChannel:
    """The home channel, in a new thread where the platform's sender can open one; the
    channel itself when it cannot (no permission, topics off: no isolation, but it works)."""
    sender = rt.senders.get(home.platform)
    if home.thread_id is not None or not isinstance(sender, ThreadOpener):
        return home
    try:
        thread_id = sender.open_thread(home.chat_id, title)
    except ThreadUnavailable as exc:
        log.warning("handoff: no thread in %s %s (%s); using the channel", home.platform,
                    home.chat_id, exc)  # fmt: skip
        return home
    key = _thread_key(home.session_key, home.chat_id, thread_id)
    return replace(home, thread_id=thread_id, session_key=key)


def _thread_key(home_key: str | None, chat_id: str, thread_id: str) -> str | None:
    """The key a thread of the home chat derives: the home's key up to the chat id, then the
    thread (thread sessions do not depend on the user). None: derived from the ids instead."""
    if home_key is None:
        return None
    parts = home_key.split(":")
    chat = key_part(chat_id)
    for index in range(4, len(parts)):
        if parts[index] == chat:
            return ":".join([*parts[: index + 1], key_part(thread_id)])
    return None


def claimer(pid: int | None = None) -> str:
    """Who claims a handoff: `<host>:<pid>:<process start time>`. The start time tells a
    process from a later one that got the same pid (a restarted container's worker)."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{psutil.Process(pid).create_time():.2f}"


def _alive(claimed_by: str) -> bool:
    _host, pid, _started = claimed_by.rsplit(":", 2)
    try:
        process = psutil.Process(int(pid))
        return process.status() != psutil.STATUS_ZOMBIE and claimer(process.pid) == claimed_by
    except (psutil.Error, ValueError):  # gone (or a claim we cannot read)
        return False


def fail_orphans(store: Store, clock: Clock) -> int:
    """At a worker's start: fail the handoffs left running by a process of this host that is
    gone (killed, or restarted mid-way), rather than risk a second delivery. A live process's
    claims, and other hosts', are left alone; another host's lost claim is failed by the
    redrive sweep once it is STALE_SECONDS old."""
    host = socket.gethostname()
    with store.read() as conn:
        claims = handoffs.running_claims(conn, host)
    lost = [handoff_id for handoff_id, claimed_by in claims if not _alive(claimed_by)]
    with store.write() as conn:
        failed = [h for h in lost if handoffs.fail(conn, h, RESTARTED, clock(), only=RUNNING)]
    if failed:
        log.warning("failed %d handoffs a lost worker of this host left running", len(failed))
    return len(failed)


def sweep(rt: Runtime) -> tuple[list[int], int]:
    """For the redrive sweep: pending requests to wake again, and how many left running past
    STALE_SECONDS (their worker died or restarted mid-way) were failed rather than redone."""
    now = rt.clock()
    with rt.store.write() as conn:
        stale = handoffs.fail_stale(conn, RESTARTED, now, now - STALE_SECONDS)
        return handoffs.pending_ids(conn, now), stale
