"""The routes table's rows: session key → arrival counter, lease, fence, wake claim.

Every write to `routes` is a function here or in `route_sessions` (the session a route points
at); callers never build SQL against it. A route row is made by a key's first arrival
(`bump_arrival`) or by binding a session to it (`route_sessions.bind_route`).
Its lease (holder, expiry, a fence that only grows) is a drain's right to run the key's turns;
see `leases` for the fencing rule and the named leases of delivery lanes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy import Connection, and_, bindparam, case, exists, or_, select, union_all, update

from shared.db.conflict import InsertOrSkip
from shared.db.prepared import Prepared
from shared.db.schema import routes
from shared.pipeline.leases import Lease, LeaseLost

# Statements are built once (values bound at execute) and run on the driver's cursor
# (shared/db/prepared.py): these run several times per turn, inside the write lock.

# --- the key's lease ---


def _route_free(now: Any) -> Any:
    """Nobody holds the key's lease at `now` (never taken, let go, or expired)."""
    return or_(routes.c.lease_holder.is_(None), routes.c.lease_expires_at <= now)


ROUTE_FREE = _route_free(bindparam("b_now"))
_ACQUIRE = Prepared(
    update(routes)
    .where(routes.c.session_key == bindparam("b_key"), ROUTE_FREE)
    .values(
        lease_holder=bindparam("b_holder"),
        lease_expires_at=bindparam("b_expires"),
        fence=routes.c.fence + 1,
        wake_sent_at=None,  # the wake-up on its way (if any) is taken: see bump_arrival
    )
    .returning(routes.c.fence)
)


# A renewal racing the release (the renewer snapshots held leases, then waits for the write
# lock) must not give a released lease an expiry: redrive would think it live.
def _check(p: str) -> Any:
    """The fence check, its values bound as `<p>key`, `<p>fence` and `<p>expires`."""
    return (
        update(routes)
        .where(
            routes.c.session_key == bindparam(f"{p}key"), routes.c.fence == bindparam(f"{p}fence")
        )
        .values(
            lease_expires_at=case(
                (routes.c.lease_holder.is_(None), None), else_=bindparam(f"{p}expires")
            )
        )
    )


_CHECK = Prepared(_check("b_"))
_LET_GO = (
    update(routes)
    .where(routes.c.session_key == bindparam("b_key"), routes.c.fence == bindparam("b_fence"))
    .values(lease_holder=None, lease_expires_at=None, wake_sent_at=None)
)
_RELEASE = Prepared(_LET_GO)
_STOP_REQUESTED = select(routes.c.stop_requested_at).where(
    routes.c.session_key == bindparam("b_key")
)


def acquire_route(conn: Connection, key: str, holder: str, now: float, ttl: float) -> Lease | None:
    fence = _ACQUIRE.scalar(
        conn, {"b_key": key, "b_now": now, "b_holder": holder, "b_expires": now + ttl}
    )
    return Lease(key, holder, int(fence)) if fence is not None else None


def check_route(conn: Connection, lease: Lease, now: float, ttl: float) -> None:
    """Extend the lease if the fence is still ours, else raise LeaseLost (call inside writes)."""
    changed = _CHECK.rowcount(
        conn, {"b_key": lease.name, "b_fence": lease.fence, "b_expires": now + ttl}
    )
    if changed != 1:
        raise LeaseLost(f"lease on {lease.name} moved past fence {lease.fence}")


# `check_route` as a CTE another statement carries (its own bind names: no clash with the
# carrier's); the route's key comes back when the fence held.
FENCE_CHECK = _check("f_").returning(routes.c.session_key)


@dataclass(frozen=True, slots=True)
class Fence:
    """A fenced write's `check_route`, for a statement that makes it part of itself on
    PostgreSQL (`FENCE_CHECK` as a CTE, its params `params()`, then `verify` with how many rows
    it returned): the check then costs no round trip of its own. It must be the transaction's
    first write, as `check_route` is: the route row it locks makes every turn recorded for the
    key visible to the statements after it."""

    lease: Lease
    now: float
    ttl: float

    def params(self) -> dict[str, Any]:
        lease = self.lease
        return {"f_key": lease.name, "f_fence": lease.fence, "f_expires": self.now + self.ttl}

    def check(self, conn: Connection) -> None:
        """The check on its own (`check_route`)."""
        check_route(conn, self.lease, self.now, self.ttl)

    def verify(self, found: int) -> None:
        if found != 1:
            raise LeaseLost(f"lease on {self.lease.name} moved past fence {self.lease.fence}")


def release_route(conn: Connection, lease: Lease) -> None:
    _RELEASE.rowcount(conn, {"b_key": lease.name, "b_fence": lease.fence})


def take_if(found: Any) -> Any:
    """`acquire_route` (bound `b_key`, `b_now`, `b_holder`, `b_expires`) as an UPDATE that keeps
    the lease only when `found` (a CTE) has a row, and otherwise takes it and lets it go at once
    (the fence moves and the wake claim clears, as an acquire and a release would): for a caller
    that makes it part of one statement with its search. It returns the fence when the route
    was free."""
    more = exists(select(1).select_from(found))
    return (
        update(routes)
        .where(routes.c.session_key == bindparam("b_key"), ROUTE_FREE)
        .values(
            lease_holder=case((more, bindparam("b_holder")), else_=None),
            lease_expires_at=case((more, bindparam("b_expires")), else_=None),
            fence=routes.c.fence + 1,
            wake_sent_at=None,
        )
        .returning(routes.c.fence)
    )


def release_unless(found: Any) -> Any:
    """`release_route` (bound `b_key`, `b_fence`) as a statement that lets go only when `found`
    (a CTE) has no row, for a caller that makes it part of one statement with its search."""
    return _LET_GO.where(~exists(select(1).select_from(found)))


def request_stop(conn: Connection, key: str, now: float) -> bool:
    """Ask the worker running `key`'s current turn to stop at its next model step."""
    result = conn.execute(
        update(routes).where(routes.c.session_key == key).values(stop_requested_at=now)
    )
    return result.rowcount > 0


def stop_requested_at(conn: Connection, key: str) -> float | None:
    value = conn.execute(_STOP_REQUESTED, {"b_key": key}).scalar()
    return float(value) if value is not None else None


# --- arrivals and wake-up claims ---

# The arrival counter's bump also tells whether a drain holds the key right now.
_BUMP = (
    update(routes)
    .where(routes.c.session_key == bindparam("b_key"))
    .values(next_seq=routes.c.next_seq + 1, updated_at=bindparam("b_now"))
)
_ARRIVAL = (routes.c.next_seq, routes.c.lease_holder, routes.c.lease_expires_at)
_CLAIMED = (routes.c.wake_sent_at, routes.c.wake_seq)
_BUMP_SEQ = Prepared(_BUMP.returning(*_ARRIVAL))
# The same, for a producer that will send the wake-up: it claims the sending (marks the key
# with this arrival's seq and time) unless a drain holds the lease or an earlier wake-up is
# still on its way. A wake-up is taken when a drain takes or lets go of the lease (which
# clears the mark); one that was lost (the broker forgot it, its worker died) is trusted only
# for WAKE_PENDING_SECONDS, and redrive finds the turns meanwhile.
WAKE_PENDING_SECONDS = 30.0


def _claiming(now: Any, stale_before: Any) -> dict[str, Any]:
    stale = or_(routes.c.wake_sent_at.is_(None), routes.c.wake_sent_at <= stale_before)
    claim = and_(_route_free(now), stale)
    return {
        "wake_sent_at": case((claim, now), else_=routes.c.wake_sent_at),
        "wake_seq": case((claim, routes.c.next_seq + 1), else_=routes.c.wake_seq),
    }


_BUMP_SEQ_AND_CLAIM_WAKE = Prepared(
    _BUMP.values(**_claiming(bindparam("b_now"), bindparam("b_stale_before"))).returning(
        *_ARRIVAL, *_CLAIMED
    )
)
_BUMP_MANY_KEYS = 64  # SQLite: keys per statement of _bump_all_sqlite, built per count on use
_bump_many: dict[tuple[int, bool], tuple[Prepared, tuple[str, ...]]] = {}
_FORGET_WAKE = Prepared(
    update(routes)
    .where(routes.c.session_key == bindparam("b_key"))
    .where(routes.c.wake_seq == bindparam("b_seq"))
    .values(wake_sent_at=None)
)
_ROUTE_COLUMNS = (
    "session_key",
    "session_id",
    "platform",
    "chat_id",
    "chat_type",
    "thread_id",
    "user_id",
    "next_seq",
    "wake_sent_at",
    "wake_seq",
    "created_at",
    "updated_at",
)
# Two first arrivals (or bindings) of one key may race on PostgreSQL: the loser's insert is
# skipped and it bumps (or binds) the winner's row instead.
_INSERT = InsertOrSkip(routes, _ROUTE_COLUMNS, ["session_key"], returning=[routes.c.next_seq])


class Arrival(NamedTuple):
    seq: int
    held: bool  # a drain holds the key's lease
    wake_pending: bool  # an earlier wake-up is still on its way


@dataclass(frozen=True, slots=True)
class Place:
    """Where a route's turns come from and its replies go."""

    platform: str
    chat_id: str
    chat_type: str
    thread_id: str | None = None
    user_id: str | None = None


def bump_arrival(
    conn: Connection,
    key: str,
    place: Place,
    now: float,
    *,
    claim_wake: bool,
    unrouted: bool = False,
) -> Arrival:
    """Bump the key's arrival counter (creating its route row); the row lock orders arrivals.
    Also says whether a drain holds the key's lease at this moment, and with `claim_wake`
    whether a wake-up is already on its way (else marks the one the caller will send).

    `unrouted`: the caller has just seen the key without a route, so the row is made first
    (a bump of the row made meanwhile by another arrival follows, as it would anyway)."""
    if unrouted:
        return _first_arrival(conn, key, place, now, claim_wake)
    found = _bump(conn, key, now, claim_wake=claim_wake)
    return found if found is not None else _first_arrival(conn, key, place, now, claim_wake)


def _first_arrival(conn: Connection, key: str, place: Place, now: float, claim: bool) -> Arrival:
    """The arrival of a key that had no route when bumped: its row, made now."""
    made = _INSERT.first(
        conn, _row(key, None, place, now, next_seq=1, wake_sent_at=now if claim else None)
    )
    if made is not None:
        return Arrival(1, held=False, wake_pending=False)
    # Another first arrival made the row meanwhile (and has committed): count after it.
    found = _bump(conn, key, now, claim_wake=claim)
    if found is None:  # pragma: no cover - the row that stopped our insert is there
        raise RuntimeError(f"route {key} neither updated nor inserted")
    return found


class ArrivalRace(RuntimeError):
    """In one batch of bumps a key's route was missing, then there: another transaction made it
    between two of them, so the batch's arrival order for that key is not certain."""


def bump_arrivals(
    conn: Connection, arriving: Sequence[tuple[str, Place, float]], *, claim_wake: bool
) -> list[Arrival]:
    """`bump_arrival` for each (key, place, now), in order. On PostgreSQL the bumps of
    existing routes go in one round trip (a pipeline), on SQLite in one statement when the keys
    all differ; a key without a route yet gets its row in order after them. Raises ArrivalRace
    if a key's route appeared midway (the caller rolls back and records the turns one by one)."""
    distinct = len({key for key, _, _ in arriving}) == len(arriving)
    if conn.dialect.name == "sqlite" and len(arriving) > 1 and distinct:
        bumped = _bump_all_sqlite(conn, arriving, claim_wake)
        return [
            arrival_from(bumped[key], now, claim_wake)
            if key in bumped
            else _first_arrival(conn, key, place, now, claim_wake)
            for key, place, now in arriving
        ]
    if conn.dialect.name != "postgresql" or len(arriving) < 2:
        return [
            bump_arrival(conn, key, place, now, claim_wake=claim_wake)
            for key, place, now in arriving
        ]
    stmt = _BUMP_SEQ_AND_CLAIM_WAKE if claim_wake else _BUMP_SEQ
    found = stmt.first_each(conn, [bump_params(key, now, claim_wake) for key, _, now in arriving])
    missing: set[str] = set()
    out: list[Arrival] = []
    for (key, place, now), route in zip(arriving, found, strict=True):
        if route is None:
            missing.add(key)
            out.append(bump_arrival(conn, key, place, now, claim_wake=claim_wake))
        elif key in missing:
            raise ArrivalRace(f"route {key} was made by another transaction midway")
        else:
            out.append(arrival_from(route, now, claim_wake))
    return out


def _bump_all_sqlite(
    conn: Connection, arriving: Sequence[tuple[str, Place, float]], claim_wake: bool
) -> dict[str, dict[str, Any]]:
    """Bump the routes of `arriving`'s keys (all different) with one UPDATE … FROM them all
    (each with its own `now`), not one each: the same as one by one, as a row's new values
    depend on that row and its own arrival alone. Returns the rows bumped, by key."""
    found: dict[str, dict[str, Any]] = {}
    for start in range(0, len(arriving), _BUMP_MANY_KEYS):
        chunk = arriving[start : start + _BUMP_MANY_KEYS]
        stmt, names = _bump_many_statement(len(chunk), claim_wake)
        values: list[Any] = []
        for key, _, now in chunk:
            values += (key, now, now - WAKE_PENDING_SECONDS) if claim_wake else (key, now)
        found.update((row["session_key"], row) for row in stmt.all_in_order(conn, names, values))
    return found


def _bump_many_statement(keys: int, claim_wake: bool) -> tuple[Prepared, tuple[str, ...]]:
    found = _bump_many.get((keys, claim_wake))
    if found is None:
        fields = ("key", "now", "stale") if claim_wake else ("key", "now")
        names = tuple(f"a_{field}_{n}" for n in range(keys) for field in fields)
        rows: list[Any] = [
            select(*(bindparam(f"a_{f}_{n}").label(f) for f in fields)) for n in range(keys)
        ]
        came = union_all(*rows).subquery("arriving")
        values: dict[str, Any] = {"next_seq": routes.c.next_seq + 1, "updated_at": came.c.now}
        if claim_wake:
            values |= _claiming(came.c.now, came.c.stale)
        stmt = update(routes).where(routes.c.session_key == came.c.key).values(values)
        returned = (*_ARRIVAL, *_CLAIMED) if claim_wake else _ARRIVAL
        found = (Prepared(stmt.returning(routes.c.session_key, *returned), dialect="sqlite"), names)
        _bump_many[(keys, claim_wake)] = found  # the same for every thread that builds it
    return found


def bump_params(key: str, now: float, claim_wake: bool) -> dict[str, Any]:
    if claim_wake:
        return {"b_key": key, "b_now": now, "b_stale_before": now - WAKE_PENDING_SECONDS}
    return {"b_key": key, "b_now": now}


def _bump(conn: Connection, key: str, now: float, *, claim_wake: bool) -> Arrival | None:
    stmt = _BUMP_SEQ_AND_CLAIM_WAKE if claim_wake else _BUMP_SEQ
    route = stmt.first(conn, bump_params(key, now, claim_wake))
    return None if route is None else arrival_from(route, now, claim_wake)


def bump_unless(found: Any, *, claim_wake: bool) -> Any:
    """`bump_arrival`'s bump of an existing route (bound `b_key`, `b_now`, with `claim_wake`
    `b_stale_before`; its row read by `arrival_from`) as a statement that bumps only when
    `found` (a CTE) has no row, for a caller that makes it part of one statement."""
    stmt: Any = (_BUMP_SEQ_AND_CLAIM_WAKE if claim_wake else _BUMP_SEQ).statement
    return stmt.where(~exists(select(1).select_from(found)))


def arrival_from(route: Mapping[str, Any], now: float, claim_wake: bool) -> Arrival:
    expires = route["lease_expires_at"]
    held = route["lease_holder"] is not None and expires is not None and expires > now
    seq = int(route["next_seq"])
    pending = claim_wake and not held and route["wake_sent_at"] is not None
    return Arrival(seq, held, pending and route["wake_seq"] != seq)


def _row(
    key: str,
    session_id: str | None,
    place: Place,
    now: float,
    *,
    next_seq: int,
    wake_sent_at: float | None = None,
) -> dict[str, Any]:
    return {
        "session_key": key,
        "session_id": session_id,
        "platform": place.platform,
        "chat_id": place.chat_id,
        "chat_type": place.chat_type,
        "thread_id": place.thread_id,
        "user_id": place.user_id,
        "next_seq": next_seq,
        "wake_sent_at": wake_sent_at,
        "wake_seq": next_seq if wake_sent_at is not None else None,
        "created_at": now,
        "updated_at": now,
    }


def forget_wake(conn: Connection, key: str, seq: int) -> None:
    """The wake-up claimed by arrival `seq` could not be sent: let the next turn send one."""
    _FORGET_WAKE.rowcount(conn, {"b_key": key, "b_seq": seq})


def insert_bound(
    conn: Connection, key: str, session_id: str | None, place: Place, now: float
) -> bool:
    """Make the route pointing at `session_id`; False when it exists (then nothing changed)."""
    return _INSERT.first(conn, _row(key, session_id, place, now, next_seq=0)) is not None
