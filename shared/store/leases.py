"""Leases with fencing tokens: a drain holds its session key's, a delivery its chat lane's.

Taking a lease bumps its fence; every write made under a lease re-checks that the fence is
unchanged in the same transaction, so a holder that lost the lease (paused, partitioned, slow)
can write nothing. A lease that was not renewed expires and the next taker bumps the fence.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, bindparam, case, insert, or_, select, update

from shared.store.schema import leases, routes


class LeaseLost(RuntimeError):
    """The fence moved: someone else holds the lease now; write nothing."""


@dataclass(frozen=True, slots=True)
class Lease:
    name: str
    holder: str
    fence: int


# Statements are built once (values bound at execute): building a Core statement and its cache
# key costs ~4x its execution on SQLite, and these run several times per turn.

_ACQUIRE_ROUTE = (
    update(routes)
    .where(
        routes.c.session_key == bindparam("b_key"),
        or_(routes.c.lease_holder.is_(None), routes.c.lease_expires_at <= bindparam("b_now")),
    )
    .values(
        lease_holder=bindparam("b_holder"),
        lease_expires_at=bindparam("b_expires"),
        fence=routes.c.fence + 1,
    )
    .returning(routes.c.fence)
)
# A renewal racing the release (the renewer snapshots held leases, then waits for the write
# lock) must not give a released lease an expiry: redrive would think it live.
_CHECK_ROUTE = (
    update(routes)
    .where(routes.c.session_key == bindparam("b_key"), routes.c.fence == bindparam("b_fence"))
    .values(
        lease_expires_at=case((routes.c.lease_holder.is_(None), None), else_=bindparam("b_expires"))
    )
)
_RELEASE_ROUTE = (
    update(routes)
    .where(routes.c.session_key == bindparam("b_key"), routes.c.fence == bindparam("b_fence"))
    .values(lease_holder=None, lease_expires_at=None)
)
_STOP_REQUESTED = select(routes.c.stop_requested_at).where(
    routes.c.session_key == bindparam("b_key")
)

_ACQUIRE_NAMED = (
    update(leases)
    .where(
        leases.c.name == bindparam("b_name"),
        or_(leases.c.holder.is_(None), leases.c.expires_at <= bindparam("b_now")),
    )
    .values(
        holder=bindparam("b_holder"), expires_at=bindparam("b_expires"), fence=leases.c.fence + 1
    )
    .returning(leases.c.fence)
)
_NAMED_EXISTS = select(leases.c.name).where(leases.c.name == bindparam("b_name"))
_INSERT_NAMED = insert(leases)
_CHECK_NAMED = (
    update(leases)
    .where(leases.c.name == bindparam("b_name"), leases.c.fence == bindparam("b_fence"))
    .values(expires_at=bindparam("b_expires"))
)
_RELEASE_NAMED = (
    update(leases)
    .where(leases.c.name == bindparam("b_name"), leases.c.fence == bindparam("b_fence"))
    .values(holder=None, expires_at=None)
)
_RELEASE_NAMED_COOLING = _RELEASE_NAMED.values(cooldown_until=bindparam("b_cooldown"))
_COOLDOWN = select(leases.c.cooldown_until).where(leases.c.name == bindparam("b_name"))
_LIVE_NAMED = select(leases.c.name).where(
    leases.c.name.like(bindparam("b_pattern")),
    leases.c.holder.is_not(None),
    leases.c.expires_at > bindparam("b_now"),
)


# --- session-key leases (on the routes row) ---


def acquire_route(conn: Connection, key: str, holder: str, now: float, ttl: float) -> Lease | None:
    fence = conn.execute(
        _ACQUIRE_ROUTE, {"b_key": key, "b_now": now, "b_holder": holder, "b_expires": now + ttl}
    ).scalar()
    return Lease(key, holder, int(fence)) if fence is not None else None


def check_route(conn: Connection, lease: Lease, now: float, ttl: float) -> None:
    """Extend the lease if the fence is still ours, else raise LeaseLost (call inside writes)."""
    result = conn.execute(
        _CHECK_ROUTE, {"b_key": lease.name, "b_fence": lease.fence, "b_expires": now + ttl}
    )
    if result.rowcount != 1:
        raise LeaseLost(f"lease on {lease.name} moved past fence {lease.fence}")


def release_route(conn: Connection, lease: Lease) -> None:
    conn.execute(_RELEASE_ROUTE, {"b_key": lease.name, "b_fence": lease.fence})


def stop_requested_at(conn: Connection, key: str) -> float | None:
    value = conn.execute(_STOP_REQUESTED, {"b_key": key}).scalar()
    return float(value) if value is not None else None


# --- named leases (delivery lanes, singletons) ---


def acquire_named(conn: Connection, name: str, holder: str, now: float, ttl: float) -> Lease | None:
    fence = conn.execute(
        _ACQUIRE_NAMED, {"b_name": name, "b_now": now, "b_holder": holder, "b_expires": now + ttl}
    ).scalar()
    if fence is not None:
        return Lease(name, holder, int(fence))
    exists = conn.execute(_NAMED_EXISTS, {"b_name": name}).first()
    if exists is not None:
        return None
    conn.execute(
        _INSERT_NAMED, {"name": name, "holder": holder, "expires_at": now + ttl, "fence": 1}
    )
    return Lease(name, holder, 1)


def check_named(conn: Connection, lease: Lease, now: float, ttl: float) -> None:
    result = conn.execute(
        _CHECK_NAMED, {"b_name": lease.name, "b_fence": lease.fence, "b_expires": now + ttl}
    )
    if result.rowcount != 1:
        raise LeaseLost(f"lease on {lease.name} moved past fence {lease.fence}")


def release_named(conn: Connection, lease: Lease, *, cooldown_until: float | None = None) -> None:
    params: dict[str, object] = {"b_name": lease.name, "b_fence": lease.fence}
    if cooldown_until is None:
        conn.execute(_RELEASE_NAMED, params)
    else:
        conn.execute(_RELEASE_NAMED_COOLING, {**params, "b_cooldown": cooldown_until})


def cooldown_until(conn: Connection, name: str) -> float | None:
    value = conn.execute(_COOLDOWN, {"b_name": name}).scalar()
    return float(value) if value is not None else None


def live_named(conn: Connection, prefix: str, now: float) -> set[str]:
    rows = conn.execute(_LIVE_NAMED, {"b_pattern": prefix + "%", "b_now": now}).scalars()
    return {str(name) for name in rows}


def route_held(conn: Connection, key: str, now: float) -> bool:
    """True while a drain holds `key`'s lease: it will see any turn committed before it lets go
    (it looks for the next turn and releases in one write), so no wake-up is needed."""
    expires = conn.execute(
        select(routes.c.lease_expires_at).where(
            routes.c.session_key == key, routes.c.lease_holder.is_not(None)
        )
    ).scalar()
    return expires is not None and float(expires) > now
