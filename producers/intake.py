"""Accepting a turn: validate, derive its session key, record it durably, then wake a worker.

The platform may be acked as soon as the turn is recorded: it is committed in state.db. If
the wake-up cannot be sent, the redrive sweep wakes the session later; nothing is lost.

`accept` does it all for one turn. A receiver under load takes it in steps instead
(producers/gateway/recorder.py): `checked` on the event loop, `record_all` for every turn that
arrived meanwhile (one transaction), then `wake_all` for the wake-ups they claimed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol, runtime_checkable

from shared.commands import Command, parse_command
from shared.db import Connection, Store
from shared.pipeline import inbox, route_sessions, routes
from shared.platforms import DM
from shared.ports import Clock, Waker
from shared.session_key import SessionKey, derive_session_key, room_key
from shared.settings import Settings
from shared.turns import InboundTurn, storable_turn, validate_turn


@runtime_checkable
class BatchWaker(Protocol):
    """A Waker that can send many drain wake-ups at once (producers/broker.py)."""

    def drain_many(self, session_keys: Sequence[str]) -> set[str]:
        """Send a drain wake-up per key; returns the keys whose wake-up was sent."""
        ...


class Accepted(NamedTuple):
    turn_id: int
    session_key: str
    seq: int
    duplicate: bool
    woken: bool


# A receiver's own write that must be committed with a turn, before it (Teams: where replies
# to the turn's conversation go); it raises to fail the turn.
Before = Callable[[Connection], None]


class Checked(NamedTuple):
    """A turn that passed validation, with its session key and command: ready to record."""

    turn: InboundTurn
    key: SessionKey
    command: Command | None
    before: Before | None = None


@dataclass(frozen=True, slots=True)
class WakeUp:
    """A wake-up a recorded turn claimed (or a redelivery's); `forget` it if it is not sent."""

    session_key: str
    seq: int
    duplicate: bool


def key_for(turn: InboundTurn, settings: Settings) -> SessionKey:
    """The turn's session key: per-user groups unless configured off, and the shared rooms."""
    return Checker(settings).key(turn)


def shared_rooms_of(settings: Settings, platform: str) -> frozenset[str]:
    """`platforms.<platform>.shared_rooms` (none for a platform without settings)."""
    found = getattr(settings.platforms, platform, None)
    return frozenset(found.shared_rooms) if found is not None else frozenset()


def checked(turn: InboundTurn, settings: Settings, before: Before | None = None) -> Checked:
    """Raises shared.turns.TurnRejected, before anything is written, for a bad turn. Text no
    database can store (NUL, a lone surrogate) is normalised first, the same on both.
    `before` is written in the turn's unit of work, ahead of it."""
    return Checker(settings)(turn, before)


class Checker:
    """`checked` and `key_for` for one Settings (frozen), reading what they need of them once
    instead of per turn: a receiver checks every turn on its event loop, where looking up a
    platform's settings on the pydantic model and copying its shared rooms cost about as much
    as deriving the key itself."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._max_text_chars = settings.pipeline.max_text_chars
        self._per_user = settings.group_sessions_per_user
        self._rooms: dict[str, frozenset[str]] = {}  # by platform, as first asked for

    def key(self, turn: InboundTurn) -> SessionKey:
        rooms = self._rooms.get(turn.platform)
        if rooms is None:
            rooms = self._rooms[turn.platform] = shared_rooms_of(self._settings, turn.platform)
        return derive_session_key(turn, group_sessions_per_user=self._per_user, shared_rooms=rooms)

    def __call__(self, turn: InboundTurn, before: Before | None = None) -> Checked:
        turn = storable_turn(turn)
        validate_turn(turn, max_text_chars=self._max_text_chars)
        return Checked(turn, self.key(turn), parse_command(turn.text), before)


def record(
    conn: Connection, item: Checked, now: float, *, unrouted: bool = False
) -> inbox.Recorded:
    """Record one checked turn (a redelivered event is a no-op), claiming its wake-up.
    `unrouted`: `record_alone` has just found the turn's key without a route."""
    if item.before is not None:
        item.before(conn)
    kind = "command" if item.command else "message"
    key = in_shared_room(conn, item)
    recorded = inbox.record_turn(
        conn, item.turn, key, now=now, kind=kind, claim_wake=True, unrouted=unrouted
    )
    if not recorded.duplicate and _stops(item):
        routes.request_stop(conn, key.key, now)
    return recorded


def in_shared_room(conn: Connection, item: Checked) -> SessionKey:
    """The turn's key, or its room's key while a handoff has shared that room.

    A handoff to a group home channel where no thread could be opened binds the room's key
    (the group's key without a user: `...:<chat_id>`) to the handed-off session and marks the
    route shared (workers/handoff.py). While that route holds its session, every per-user key
    of the room gives way to it, so anyone authorised in the room continues the session, as in
    a thread; once the session ends there (/new, a reset) the room is per user again. Keys of
    DMs, threads and rooms already shared are left as they are."""
    room = _room_to_look_up(item)
    if room is not None and route_sessions.shared_room(conn, room):
        return SessionKey(room, shared=True)
    return item.key


def _room_to_look_up(item: Checked) -> str | None:
    """The room key `in_shared_room` must look up for `item`, or None when it needs none."""
    turn, key = item.turn, item.key
    if key.shared or turn.chat_type == DM or not turn.user_id:
        return None
    return room_key(key.key, turn.user_id)


def record_alone(conn: Connection, item: Checked, now: float) -> inbox.Recorded | inbox.Alone:
    """PostgreSQL: `record` as its one statement (inbox.record_turn_alone), for
    Store.commit_alone, for a turn that `one_statement` allows; else why it was not recorded
    (then `record` does it in a transaction)."""
    kind = "command" if item.command else "message"
    return inbox.record_turn_alone(conn, item.turn, item.key, now=now, kind=kind, claim_wake=True)


def one_statement(item: Checked) -> bool:
    """Whether `record` can be one statement for `item` (when its key has a route): not when
    the turn has its own write before it, its room must be looked up for a shared handoff, or
    it is a /stop (which marks the route)."""
    return item.before is None and _room_to_look_up(item) is None and not _stops(item)


def _stops(item: Checked) -> bool:
    return item.command is not None and item.command.name == "stop"


def wake_up_for(recorded: inbox.Recorded) -> WakeUp | None:
    """The wake-up to send for `recorded`, or None when a worker will find it anyway (a drain
    holds the session, or the wake-up of an earlier turn is still on its way).

    A duplicate event gets a wake-up too: its first delivery's may have been lost."""
    if recorded.lease_held or recorded.wake_pending:
        return None
    return WakeUp(recorded.session_key, recorded.seq, recorded.duplicate)


def accept(
    store: Store, waker: Waker, turn: InboundTurn, *, settings: Settings, clock: Clock
) -> Accepted:
    """Record `turn` (a redelivered event is a no-op) and wake its session's drain.

    `woken` is True when a worker will pick the turn up promptly: a wake-up was sent, one sent
    for an earlier turn has not been taken yet (a burst of turns costs one task), or a drain
    already holds the session's lease. When False the redrive sweep wakes it later.

    Raises shared.turns.TurnRejected, before anything is written, for a bad turn.
    """
    item = checked(turn, settings)
    recorded = record_one(store, item, clock)
    wake = wake_up_for(recorded)
    woken = wake is None or waker.drain(wake.session_key)
    if not woken and wake is not None:
        forget(store, [wake])
    return Accepted(recorded.turn_id, recorded.session_key, recorded.seq, recorded.duplicate, woken)


def record_one(store: Store, item: Checked, clock: Clock) -> inbox.Recorded:
    """Record `item` and return once committed.

    On PostgreSQL a turn of a key that has a route is one statement (`record_alone`), written
    without BEGIN … COMMIT around it (Store.commit_alone): one round trip instead of three.
    Any turn that takes more (a key's first, one with a write before it, …) is `record`ed in
    a transaction, as on SQLite."""
    unrouted = False
    if store.dialect == "postgresql" and one_statement(item):
        alone = store.commit_alone(lambda conn: record_alone(conn, item, clock()))
        if isinstance(alone, inbox.Recorded):
            return alone
        unrouted = alone is inbox.Alone.UNROUTED
    return store.commit(lambda conn: record(conn, item, clock(), unrouted=unrouted))


def record_all(
    store: Store, items: Sequence[Checked], *, clock: Clock
) -> list[inbox.Recorded | Exception]:
    """Record each of `items` as its own unit of one transaction: one that fails (raises)
    leaves the others recorded. Returns once committed.

    First all together (`record_batch`: a few statements for the batch instead of three per
    turn); if that raises, it is rolled back and each turn is recorded on its own, so a turn
    that cannot be recorded fails alone. On PostgreSQL a lone turn that can be one statement
    is `record_one` first (no transaction around it when its key has a route); if that
    raises, as before."""
    if len(items) > 1:
        with contextlib.suppress(Exception):
            return list(store.commit(lambda conn: record_batch(conn, items, clock)))
    elif len(items) == 1 and store.dialect == "postgresql" and one_statement(items[0]):
        with contextlib.suppress(Exception):
            return [record_one(store, items[0], clock)]
    return store.commit_each([_recording(item, clock) for item in items])


def record_batch(conn: Connection, items: Sequence[Checked], clock: Clock) -> list[inbox.Recorded]:
    """`record` for each of `items`, in order, as one unit of work (inbox.record_turns)."""
    for item in items:
        if item.before is not None:
            item.before(conn)
    arriving = [
        inbox.Arriving(
            item.turn, in_shared_room(conn, item), "command" if item.command else "message", clock()
        )
        for item in items
    ]
    recorded = inbox.record_turns(conn, arriving, claim_wake=True)
    for item, came, done in zip(items, arriving, recorded, strict=True):
        if not done.duplicate and item.command is not None and item.command.name == "stop":
            routes.request_stop(conn, came.key.key, came.now)
    return recorded


def _recording(item: Checked, clock: Clock) -> Callable[[Connection], inbox.Recorded]:
    return lambda conn: record(conn, item, clock())


def wake_all(store: Store, waker: Waker, wakes: Sequence[WakeUp]) -> list[WakeUp]:
    """Send `wakes` (one per session key) in one batch where the broker allows it; the claim of
    each one not sent is forgotten, so the next turn sends one and redrive finds this one.
    Returns those not sent."""
    keys = list(dict.fromkeys(wake.session_key for wake in wakes))
    sent = drain_many(waker, keys)
    lost = [wake for wake in wakes if wake.session_key not in sent]
    forget(store, lost)
    return lost


def drain_many(waker: Waker, keys: Sequence[str]) -> set[str]:
    """Drain wake-ups for `keys`: in one batch by a waker that can, else one by one.
    Returns the keys whose wake-up was sent."""
    if isinstance(waker, BatchWaker):
        return waker.drain_many(keys)
    return {key for key in keys if waker.drain(key)}


def forget(store: Store, wakes: Sequence[WakeUp]) -> None:
    """Let go of the wake-up claims of new turns whose wake-up was not sent."""
    claims = [(wake.session_key, wake.seq) for wake in wakes if not wake.duplicate]

    def work(conn: Connection) -> None:
        for key, seq in claims:
            routes.forget_wake(conn, key, seq)

    if claims:
        store.commit(work)
