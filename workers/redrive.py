"""The redrive sweep: wake every session and lane whose work is due and nobody holds.

Celery messages are only wake-ups; if the broker lost them (restart, FLUSHALL, a worker
killed holding prefetched messages) this sweep finds the work in state.db and wakes it.
It also reports turns that went dead since the last sweep, once each.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from shared.db.meta import get_meta, set_meta
from shared.pipeline import inbox, leases, outbox
from workers.flush import lane_lease_name
from workers.handoff import sweep as handoff_sweep
from workers.runtime import Runtime

log = logging.getLogger(__name__)

DEAD_WATERMARK = "redrive.dead_reported_upto"


@dataclass(frozen=True, slots=True)
class RedriveResult:
    drains: int
    deliveries: int
    dead: int


def redrive(rt: Runtime, *, limit: int = 1000) -> RedriveResult:
    now = rt.clock()
    with rt.store.read() as conn:
        keys = inbox.keys_needing_wake(conn, now, limit=limit)
        lanes = outbox.lanes_with_pending(conn, now, limit=limit)
        busy = leases.live_named(conn, "lane:", now)
    for key in keys:
        rt.waker.drain(key)
    woken_lanes = [lane for lane in lanes if lane_lease_name(lane) not in busy]
    for lane in woken_lanes:
        rt.waker.deliver(lane)
    dead = _report_dead(rt)
    waiting, stale = handoff_sweep(rt)
    for handoff_id in waiting:  # a lost wake-up; the claim keeps a duplicate harmless
        rt.waker.handoff(handoff_id)
    if stale:
        log.warning("redrive failed %d handoffs left running by a lost worker", stale)
    if keys or woken_lanes:
        log.info("redrive woke %d sessions and %d lanes", len(keys), len(woken_lanes))
    return RedriveResult(len(keys), len(woken_lanes), dead)


def _report_dead(rt: Runtime) -> int:
    with rt.store.write() as conn:
        mark = get_meta(conn, DEAD_WATERMARK)
        after = int(mark) if mark else 0
        dead = inbox.dead_turns_after(conn, after)
        if not dead:
            return 0
        for turn in dead:
            log.error(
                "dead turn %s: %s seq %s after %s attempts (%s), received %s",
                turn.id,
                turn.session_key,
                turn.seq,
                turn.attempts,
                turn.error,
                time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(turn.received_at)),
            )
        set_meta(conn, DEAD_WATERMARK, str(dead[-1].id))
    return len(dead)
