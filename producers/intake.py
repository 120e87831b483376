"""Accepting a turn: validate, derive its session key, record it durably, then wake a worker.

The platform may be acked as soon as `accept` returns: the turn is committed in state.db. If
the wake-up cannot be sent, the redrive sweep wakes the session later; nothing is lost.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection

from shared.commands import parse_command
from shared.ports import Clock, Waker
from shared.session_key import SessionKey, derive_session_key
from shared.settings import Settings
from shared.store import Store, inbox
from shared.turns import InboundTurn, validate_turn


@dataclass(frozen=True, slots=True)
class Accepted:
    turn_id: int
    session_key: str
    seq: int
    duplicate: bool
    woken: bool


def key_for(turn: InboundTurn, settings: Settings) -> SessionKey:
    """The turn's session key: per-user groups unless configured off, and the shared rooms."""
    platform = getattr(settings.platforms, turn.platform, None)
    shared_rooms = frozenset(platform.shared_rooms) if platform is not None else frozenset()
    return derive_session_key(
        turn,
        group_sessions_per_user=settings.group_sessions_per_user,
        shared_rooms=shared_rooms,
    )


def accept(
    store: Store, waker: Waker, turn: InboundTurn, *, settings: Settings, clock: Clock
) -> Accepted:
    """Record `turn` (a redelivered event is a no-op) and wake its session's drain.

    `woken` is True when a worker will pick the turn up promptly: a wake-up was sent, one sent
    for an earlier turn has not been taken yet (a burst of turns costs one task), or a drain
    already holds the session's lease. When False the redrive sweep wakes it later.

    Raises shared.turns.TurnRejected, before anything is written, for a bad turn.
    """
    validate_turn(turn, max_text_chars=settings.pipeline.max_text_chars)
    key = key_for(turn, settings)
    command = parse_command(turn.text)

    def record(conn: Connection) -> inbox.Recorded:
        now = clock()
        recorded = inbox.record_turn(
            conn, turn, key, now=now, kind="command" if command else "message", claim_wake=True
        )
        if not recorded.duplicate and command is not None and command.name == "stop":
            inbox.request_stop(conn, key.key, now)
        return recorded

    recorded = store.run_write(record)
    # A duplicate event gets a wake-up too: its first delivery's may have been lost.
    woken = recorded.lease_held or recorded.wake_pending or waker.drain(key.key)
    if not woken and not recorded.duplicate:  # the next turn sends one; redrive finds this one
        store.run_write(lambda conn: inbox.forget_wake(conn, key.key, recorded.seq))
    return Accepted(recorded.turn_id, key.key, recorded.seq, recorded.duplicate, woken)
