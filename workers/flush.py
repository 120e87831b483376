"""Flushing one chat lane: pending replies sent in write order, at least once, under a lease.

A platform's "wait" (429 retry_after) puts the whole lane in a cooldown that every worker
honours, and the flush re-schedules itself instead of sleeping, freeing the worker slot.

The lane's lease is short (`lane_ttl`) and the worker's Renewer extends it while a send is in
flight, so a slow platform keeps its lane and a killed worker's lane is free again within
seconds; a flush that lost its lease (paused, cut off) stops before its next send, and a send
cut off midway is dropped by the kernel before the lease can move (workers/delivery/sockets.py).

A flush sends only while its lease is surely its own for as long as that send can take: a
write that took or extended the lease proves it only up to the clock read before that write
plus the lease's ttl, not from when its answer arrived. An answer held up past that (the
store's network cut after the commit, the process paused) is not taken as leave to send; the
flush asks the store again first, and stops if another worker has the lane by then.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from shared.db import Connection
from shared.pipeline import leases, outbox
from workers.delivery import sockets
from workers.delivery.base import RetryLater, Undeliverable
from workers.delivery.registry import UnknownPlatform
from workers.renewer import Held
from workers.runtime import Runtime

log = logging.getLogger(__name__)

LANE_TTL = sockets.LANE_TTL
MAX_SEND_ATTEMPTS = 8
BATCH = 50
PAGE = 10


@dataclass(frozen=True, slots=True)
class FlushResult:
    sent: int
    reason: str  # idle | busy | cooldown | retry | lost | batch
    retry_in: float | None = None


def lane_lease_name(lane: str) -> str:
    return f"lane:{lane}"


def lane_ttl(rt: Runtime) -> float:
    """How long a dead holder keeps a lane: LANE_TTL, or the session lease when shorter."""
    return sockets.lane_ttl(rt.lease_ttl)


@dataclass(frozen=True, slots=True)
class _Step:
    """After one row: why the lane stops now, or the next rows (when asked to look)."""

    stop: tuple[str, float] | None = None
    rows: list[outbox.OutboxRow] | None = None
    released: bool = False


@dataclass(frozen=True, slots=True)
class Opened:
    """What opening a lane found: its lease and first rows, the lane busy, or cooling down."""

    lease: leases.Lease | None
    rows: list[outbox.OutboxRow]
    cooldown_left: float | None = None
    until: float = 0.0  # the lease is surely ours until then (see Held.until)


def open_lane(
    conn: Connection, holder: str, lane: str, now: float, ttl: float = LANE_TTL
) -> Opened:
    """Inside a write: take the lane's lease for `holder` and read its first rows (a drain does
    this in the transaction that writes the replies, saving a write of its own)."""
    name = lane_lease_name(lane)
    lease = leases.acquire_lane(conn, name, holder, now, ttl)
    if lease is None:
        # Busy by what was committed when this statement began. The holder may be inside its
        # look-and-let-go write right now, having looked before our replies were committed: on
        # PostgreSQL that write runs beside ours. Locking the lease row orders the two: if the
        # holder's write is in flight we wait for it and try again on what it left (let go:
        # ours now); if ours is first, its write waits for our commit and its look sees our
        # replies. (The holder's write takes the row first: check_named or acquire.)
        cooldown = leases.cooldown_until(conn, name, lock=True)
        if cooldown is not None and cooldown > now:
            return Opened(None, [], cooldown_left=cooldown - now)
        lease = leases.acquire_named(conn, name, holder, now, ttl)  # a new lane
    rows = _pending_or_release(conn, lease) if lease is not None else []
    return Opened(lease, rows, until=now + ttl)


def flush(rt: Runtime, lane: str) -> FlushResult:
    holder = rt.holder()
    opened = rt.store.commit(lambda conn: open_lane(conn, holder, lane, rt.clock(), lane_ttl(rt)))
    return send_opened(rt, lane, opened)


def send_opened(rt: Runtime, lane: str, opened: Opened) -> FlushResult:
    """Send what `open_lane` found, then what follows it, and let the lane go."""
    if opened.cooldown_left is not None:
        rt.waker.deliver(lane, countdown=opened.cooldown_left)
        return FlushResult(0, "cooldown", opened.cooldown_left)
    lease, rows = opened.lease, opened.rows
    if lease is None:
        return FlushResult(0, "busy")
    if not rows:  # released in the same transaction
        return FlushResult(0, "idle")
    result = FlushResult(0, "idle")
    released = False
    cooldown_to: float | None = None
    try:
        hold = rt.renewer.hold(lease, rt.clock(), named=True, ttl=lane_ttl(rt), until=opened.until)
        with hold as held:
            result, released = _send_pending(rt, lease, rows, held)
        if result.reason in {"cooldown", "retry"} and result.retry_in is not None:
            cooldown_to = rt.clock() + result.retry_in if result.reason == "cooldown" else None
    except leases.LeaseLost:
        return FlushResult(result.sent, "lost")
    finally:
        if not released:
            with rt.store.write() as conn:
                leases.release_named(conn, lease, cooldown_until=cooldown_to)
    if result.reason in {"cooldown", "retry", "batch"}:
        rt.waker.deliver(lane, countdown=result.retry_in)
    return result


def _pending_or_release(conn: Connection, lease: leases.Lease) -> list[outbox.OutboxRow]:
    """The lane's next rows; with none, the lease is let go in this same write.

    Checking and releasing in one write transaction means a reply committed after it finds the
    lane free when its wake-up runs, and one committed before it is seen here. On PostgreSQL
    the two writes can run side by side: the caller has already written the lease row in this
    transaction (acquire or check_named), and a reply's writer that finds the lane busy waits
    on that row (open_lane), so it either takes the lane we let go or commits before we look.
    """
    rows = outbox.pending(conn, lease.name.removeprefix("lane:"), limit=PAGE)
    if not rows:
        leases.release_named(conn, lease)
    return rows


def _send_pending(
    rt: Runtime, lease: leases.Lease, rows: list[outbox.OutboxRow], held: Held
) -> tuple[FlushResult, bool]:
    """Send `rows` and what follows them; True when the lane was released (nothing left)."""
    sent = 0
    while True:
        step = _Step()
        for index, row in enumerate(rows):
            if held.lost:  # another worker has the lane: it sends this row
                raise leases.LeaseLost(f"lease on {lease.name} lost before outbox {row.id}")
            now = rt.clock()
            if row.not_before is not None and row.not_before > now:
                return FlushResult(sent, "retry", row.not_before - now), False
            if not _ours_for_a_send(rt, lease, held):
                return FlushResult(sent, "retry", 0.0), False
            look = index == len(rows) - 1 and sent + 1 < BATCH
            step = _send_one(rt, lease, row, held, look=look)
            if step.stop is not None:
                return FlushResult(sent, step.stop[0], step.stop[1]), False
            sent += 1
        if step.released:
            return FlushResult(sent, "idle"), True
        if not step.rows:
            return FlushResult(sent, "batch"), False
        rows = step.rows


def _ours_for_a_send(rt: Runtime, lease: leases.Lease, held: Held) -> bool:
    """Whether the lane stays this worker's until a send begun now is answered or dropped by
    the kernel (`sockets.unacked_limit`). When what the last write proved runs short of that,
    the store is asked again (LeaseLost: another worker has it); False when even that answer
    came back too late to send on."""
    ttl, within = lane_ttl(rt), sockets.unacked_limit(rt.lease_ttl)
    if rt.clock() + within < held.until:
        return True
    with rt.store.write() as conn:
        now = rt.clock()
        leases.check_named(conn, lease, now, ttl)
    held.confirmed(now, ttl)
    return rt.clock() + within < held.until


def _send_one(
    rt: Runtime, lease: leases.Lease, row: outbox.OutboxRow, held: Held, *, look: bool
) -> _Step:
    """Send one row and record what happened (with a look at what is next when `look`)."""
    metrics = rt.metrics
    ttl = lane_ttl(rt)
    try:
        sender = rt.senders.get(row.platform)
        receipt = sender.send(row)
    except RetryLater as exc:
        metrics.rate_limit_waits.labels(row.platform).inc()
        metrics.rate_limit_seconds.labels(row.platform).inc(max(0.0, exc.after))
        _record_retry(rt, lease, row, exc.after, exc.reason, failed=False)
        return _Step(stop=("cooldown", exc.after))
    except (Undeliverable, UnknownPlatform) as exc:
        metrics.send_errors.labels(row.platform, "undeliverable").inc()
        log.warning("outbox %s to %s undeliverable: %s", row.id, row.lane, exc)
        with rt.store.write() as conn:
            now = rt.clock()
            leases.check_named(conn, lease, now, ttl)
            outbox.mark_failed(conn, row.id, str(exc)[:500], now)
            rows = _pending_or_release(conn, lease) if look else None
        held.confirmed(now, ttl)
        return _Step(rows=rows, released=rows == [])
    except Exception as exc:  # transient: connection dropped, 5xx
        metrics.send_errors.labels(row.platform, "retry").inc()
        wait = min(300.0, 2.0 ** (row.attempts + 1))
        _record_retry(rt, lease, row, wait, f"{type(exc).__name__}: {exc}")
        return _Step(stop=("retry", wait))

    message_id = receipt.platform_message_id

    def mark_sent(conn: Connection) -> tuple[list[outbox.OutboxRow] | None, float]:
        now = rt.clock()
        leases.check_named(conn, lease, now, ttl)
        outbox.mark_sent(conn, row.id, message_id, now)
        return None, now

    def mark_sent_and_look(conn: Connection) -> tuple[list[outbox.OutboxRow] | None, float]:
        # fencing, marking, looking and (nothing left) letting go: on PostgreSQL one statement,
        # sent without BEGIN and COMMIT (one round trip, not four)
        now = rt.clock()
        lane = lease.name.removeprefix("lane:")
        return outbox.mark_sent_and_next(conn, row.id, message_id, now, lease, lane, PAGE, ttl), now

    rows, now = rt.store.commit_alone(mark_sent_and_look) if look else rt.store.commit(mark_sent)
    held.confirmed(now, ttl)
    metrics.replies_sent.labels(row.platform).inc()
    return _Step(rows=rows, released=rows == [])


def _record_retry(
    rt: Runtime,
    lease: leases.Lease,
    row: outbox.OutboxRow,
    wait: float,
    reason: str,
    *,
    failed: bool = True,
) -> None:
    """A rate limit or 429 is an instruction to wait, not a failure: it does not use up the
    row's attempts (the platform's cooldown bounds it); errors do."""
    now = rt.clock()
    with rt.store.write() as conn:
        leases.check_named(conn, lease, now, lane_ttl(rt))
        attempts = outbox.mark_retry(conn, row.id, now + wait, reason[:500], failed=failed)
        if attempts >= MAX_SEND_ATTEMPTS:
            outbox.mark_failed(
                conn, row.id, f"gave up after {attempts} attempts: {reason}"[:500], now
            )
            log.error("outbox %s to %s failed for good: %s", row.id, row.lane, reason)


def reads_store(rt: Runtime, platform: str) -> bool:
    """Whether `platform`'s replies are delivered by their commit (see Sender.reads_store)."""
    try:
        return bool(getattr(rt.senders.get(platform), "reads_store", False))
    except UnknownPlatform:
        return False


def nudge(rt: Runtime, row: outbox.OutboxRow) -> None:
    """After the commit that delivered `row` to a store-reading client: tell it to look now.
    Best effort; the client also polls."""
    try:
        rt.senders.get(row.platform).send(row)
    except Exception as exc:
        log.warning("could not nudge %s about outbox %s: %s", row.lane, row.id, exc)


def deliver_now(rt: Runtime, lane: str, opened: Opened | None = None) -> None:
    """Send `lane`'s new replies from this thread if the lane is free (`opened`: the lane was
    already opened in the caller's write).

    If another worker holds the lane it sends them (it looks for more and releases in one
    write); if the platform said wait, flush has scheduled the retry. Only an unexpected error
    falls back to a delivery task.
    """
    try:
        if opened is None:
            flush(rt, lane)
        else:
            send_opened(rt, lane, opened)
    except Exception as exc:
        log.warning("inline delivery to %s failed (%s); queued for a delivery worker", lane, exc)
        rt.waker.deliver(lane)
