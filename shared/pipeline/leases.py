"""Leases with fencing tokens: a drain holds its session key's, a delivery its chat lane's.

Taking a lease bumps its fence; every write made under a lease re-checks that the fence is
unchanged in the same transaction, so a holder that lost the lease (paused, partitioned, slow)
can write nothing. A lease that was not renewed expires and the next taker bumps the fence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, bindparam, case, exists, insert, or_, select, update

from shared.db.like import ESCAPE, prefix_pattern
from shared.db.prepared import Prepared
from shared.db.schema import leases


class LeaseLost(RuntimeError):
    """The fence moved: someone else holds the lease now; write nothing."""


@dataclass(frozen=True, slots=True)
class Lease:
    name: str
    holder: str
    fence: int


# Statements are built once (values bound at execute) and run on the driver's cursor
# (shared/db/prepared.py): these run several times per turn, inside the write lock.

_ACQUIRE_NAMED_STATEMENT = (
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
_ACQUIRE_NAMED = Prepared(_ACQUIRE_NAMED_STATEMENT)
# A chat lane is taken only when no platform asked it to wait (its cooldown is over).
_ACQUIRE_LANE = Prepared(
    _ACQUIRE_NAMED_STATEMENT.where(
        or_(leases.c.cooldown_until.is_(None), leases.c.cooldown_until <= bindparam("b_now"))
    )
)
_NAMED_EXISTS = Prepared(select(leases.c.name).where(leases.c.name == bindparam("b_name")))
_INSERT_NAMED = Prepared(
    insert(leases).values(
        name=bindparam("b_name"),
        holder=bindparam("b_holder"),
        expires_at=bindparam("b_expires"),
        fence=1,
    )
)
# A renewal racing its holder's release (the Renewer's thread) leaves the lease released.
_CHECK_NAMED = Prepared(
    update(leases)
    .where(leases.c.name == bindparam("b_name"), leases.c.fence == bindparam("b_fence"))
    .values(expires_at=case((leases.c.holder.is_(None), None), else_=bindparam("b_expires")))
)
_RELEASE_NAMED_STATEMENT = (
    update(leases)
    .where(leases.c.name == bindparam("b_name"), leases.c.fence == bindparam("b_fence"))
    .values(holder=None, expires_at=None)
)
_RELEASE_NAMED = Prepared(_RELEASE_NAMED_STATEMENT)
_RELEASE_NAMED_COOLING = Prepared(
    _RELEASE_NAMED_STATEMENT.values(cooldown_until=bindparam("b_cooldown"))
)
_COOLDOWN = Prepared(select(leases.c.cooldown_until).where(leases.c.name == bindparam("b_name")))
# The same read after any write in flight on the lease has committed, and keeping others' writes
# to it out until this transaction ends (FOR NO KEY UPDATE on PostgreSQL; SQLite compiles no
# lock clause: its one writer already serializes).
_COOLDOWN_LOCKED = Prepared(
    select(leases.c.cooldown_until)
    .where(leases.c.name == bindparam("b_name"))
    .with_for_update(key_share=True)
)
_LIVE_NAMED = select(leases.c.name).where(
    leases.c.name.like(bindparam("b_pattern"), escape=ESCAPE),
    leases.c.holder.is_not(None),
    leases.c.expires_at > bindparam("b_now"),
)


# The session-key lease lives on the routes row: see routes.acquire_route.


# --- named leases (delivery lanes, singletons) ---


def acquire_named(conn: Connection, name: str, holder: str, now: float, ttl: float) -> Lease | None:
    fence = _ACQUIRE_NAMED.scalar(
        conn, {"b_name": name, "b_now": now, "b_holder": holder, "b_expires": now + ttl}
    )
    if fence is not None:
        return Lease(name, holder, int(fence))
    if _NAMED_EXISTS.scalar(conn, {"b_name": name}) is not None:
        return None
    _INSERT_NAMED.rowcount(conn, {"b_name": name, "b_holder": holder, "b_expires": now + ttl})
    return Lease(name, holder, 1)


def acquire_lane(conn: Connection, name: str, holder: str, now: float, ttl: float) -> Lease | None:
    """An existing lane's lease when it is free and not cooling down; None otherwise (busy,
    cooling down, or not made yet: see `cooldown_until` and `acquire_named`)."""
    fence = _ACQUIRE_LANE.scalar(
        conn, {"b_name": name, "b_now": now, "b_holder": holder, "b_expires": now + ttl}
    )
    return Lease(name, holder, int(fence)) if fence is not None else None


def check_named(conn: Connection, lease: Lease, now: float, ttl: float) -> None:
    changed = _CHECK_NAMED.rowcount(
        conn, {"b_name": lease.name, "b_fence": lease.fence, "b_expires": now + ttl}
    )
    if changed != 1:
        raise LeaseLost(f"lease on {lease.name} moved past fence {lease.fence}")


def release_named(conn: Connection, lease: Lease, *, cooldown_until: float | None = None) -> None:
    params: dict[str, object] = {"b_name": lease.name, "b_fence": lease.fence}
    if cooldown_until is None:
        _RELEASE_NAMED.rowcount(conn, params)
    else:
        _RELEASE_NAMED_COOLING.rowcount(conn, {**params, "b_cooldown": cooldown_until})


def checked_or_released_unless(found: Any) -> Any:
    """`check_named` (bound `b_name`, `b_fence`, `b_expires`) and, when `found` (a CTE) has no
    row, `release_named`, as one UPDATE returning the fence when it held: for a caller that makes
    it part of one statement with its look (a statement changes a row once, so the check and the
    release cannot be two UPDATEs in it)."""
    more = exists(select(1).select_from(found))
    return (
        update(leases)
        .where(leases.c.name == bindparam("b_name"), leases.c.fence == bindparam("b_fence"))
        .values(
            holder=case((more, leases.c.holder), else_=None),
            expires_at=case(
                (leases.c.holder.is_(None), None), (more, bindparam("b_expires")), else_=None
            ),
        )
        .returning(leases.c.fence)
    )


def cooldown_until(conn: Connection, name: str, *, lock: bool = False) -> float | None:
    """The lane's cooldown; with `lock`, read once any write in flight on its lease committed,
    and holding that lease's row until this transaction ends (see flush.open_lane)."""
    value = (_COOLDOWN_LOCKED if lock else _COOLDOWN).scalar(conn, {"b_name": name})
    return float(value) if value is not None else None


def live_named(conn: Connection, prefix: str, now: float) -> set[str]:
    rows = conn.execute(_LIVE_NAMED, {"b_pattern": prefix_pattern(prefix), "b_now": now}).scalars()
    return {str(name) for name in rows}
