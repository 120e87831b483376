"""The pipeline bench's turns: producing them through producers.intake.accept, waiting for
them, and reading their timings, order and exactly-once outcome back from state.db."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import text

from bench.common import log, percentiles
from producers.intake import accept
from shared.db import Store
from shared.turns import InboundTurn

if TYPE_CHECKING:
    from bench.pipeline_stack import Stack

# Waiting for a phase to end: figures come from the turns' own timestamps, so this only sets
# how soon the bench notices; a count over the outbox every 50 ms would eat into the workers'
# CPU during the very phase being measured.
WAIT_POLL = 0.25


def in_threads(threads: int, work: Callable[[int], None]) -> None:
    """Run work(0) … work(threads - 1) at once; re-raise the first failure."""
    with ThreadPoolExecutor(threads) as pool:
        for future in [pool.submit(work, index) for index in range(threads)]:
            future.result()


def make_turn(chat: str, n: int) -> InboundTurn:
    return InboundTurn(
        platform="cli",
        chat_id=chat,
        chat_type="dm",
        event_id=f"{chat}-{n}",
        text=f"bench turn {n} of {chat}",
        user_id="bench",
        message_id=f"{chat}-m{n}",
    )


def max_turn_id(store: Store) -> int:
    with store.read() as conn:
        return int(conn.execute(text("SELECT coalesce(max(id), 0) FROM inbox")).scalar_one())


def count_finished(store: Store, after: int, *, delivered: bool) -> int:
    if delivered:
        sql = "SELECT count(*) FROM outbox WHERE turn_id > :a AND status != 'pending'"
    else:
        sql = "SELECT count(*) FROM inbox WHERE id > :a AND status NOT IN ('waiting', 'running')"
    with store.read() as conn:
        return int(conn.execute(text(sql), {"a": after}).scalar_one())


def wait_for(store: Store, after: int, total: int, *, delivered: bool, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    last_note = time.monotonic()
    while True:
        done = count_finished(store, after, delivered=delivered)
        if done >= total:
            return True
        if time.monotonic() > deadline:
            log(f"timed out: {done}/{total} {'delivered' if delivered else 'done'}")
            return False
        if time.monotonic() - last_note > 5:
            log(f"  {done}/{total} {'delivered' if delivered else 'done'}")
            last_note = time.monotonic()
        time.sleep(WAIT_POLL)


@dataclass(frozen=True)
class TurnTimes:
    key: str
    seq: int
    status: str
    attempts: int
    received: float
    started: float | None
    finished: float | None
    sent: float | None


def turn_times(store: Store, after: int) -> list[TurnTimes]:
    sql = """
        SELECT i.session_key, i.seq, i.status, i.attempts, i.received_at, i.started_at,
               i.finished_at, (SELECT max(o.sent_at) FROM outbox o
                               WHERE o.turn_id = i.id AND o.status = 'sent') AS sent_at
        FROM inbox i WHERE i.id > :a ORDER BY i.session_key, i.seq
    """
    with store.read() as conn:
        rows = conn.execute(text(sql), {"a": after}).all()
    return [TurnTimes(*row) for row in rows]


def order_ok(times: list[TurnTimes]) -> bool:
    """Per session, turn k+1 started after turn k finished (so they finished in seq order)."""
    previous: TurnTimes | None = None
    for row in times:  # ordered by key, seq
        if row.finished is None or row.started is None:
            return False
        same = previous is not None and previous.key == row.key
        if (
            same
            and previous is not None
            and previous.finished is not None
            and (row.seq != previous.seq + 1 or row.started < previous.finished)
        ):
            return False
        previous = row
    return True


def exactly_once_ok(store: Store, after: int) -> bool:
    """Every turn's user message is in its session's transcript exactly once, in seq order."""
    sql = """
        SELECT i.id, count(m.id) FROM inbox i
        LEFT JOIN messages m ON m.session_id = i.session_id AND m.role = 'user'
             AND m.platform_message_id = i.message_id
        WHERE i.id > :a GROUP BY i.id HAVING count(m.id) != 1
    """
    order_sql = """
        SELECT i.session_key, i.seq, m.id FROM inbox i
        JOIN messages m ON m.session_id = i.session_id AND m.role = 'user'
             AND m.platform_message_id = i.message_id
        WHERE i.id > :a ORDER BY i.session_key, i.seq
    """
    with store.read() as conn:
        if conn.execute(text(sql), {"a": after}).first() is not None:
            return False
        rows = conn.execute(text(order_sql), {"a": after}).all()
    for prev, row in itertools.pairwise(rows):
        if prev[0] == row[0] and row[2] <= prev[2]:
            return False
    return True


def summarise(times: list[TurnTimes], store: Store, after: int) -> dict[str, Any]:
    first = min(t.received for t in times)
    finished = [t.finished for t in times if t.finished is not None]
    sent = [t.sent for t in times if t.sent is not None]
    done_span = max(finished) - first if finished else float("nan")
    sent_span = max(sent) - first if len(sent) == len(times) else float("nan")
    return {
        "turns": len(times),
        "all_done": all(t.status == "done" for t in times),
        "all_delivered": len(sent) == len(times),
        "elapsed_s": round(done_span, 3),
        "turns_per_s": round(len(times) / done_span, 1) if done_span > 0 else None,
        "delivered_per_s": round(len(times) / sent_span, 1) if sent else None,
        "enqueue_to_start_ms": percentiles([t.started - t.received for t in times if t.started]),
        "enqueue_to_done_ms": percentiles([t.finished - t.received for t in times if t.finished]),
        "enqueue_to_delivered_ms": percentiles([t.sent - t.received for t in times if t.sent]),
        "order_ok": order_ok(times),
        "exactly_once_ok": exactly_once_ok(store, after),
        "max_attempts": max(t.attempts for t in times),
    }


def produce(stack: Stack, prefix: str, sessions: int, per_session: int) -> float:
    """Accept every turn, round-robin over sessions, from `stack.producers` threads; a session's
    turns always come from one thread, in order. Returns the seconds it took."""
    threads = stack.producers

    def work(index: int) -> None:
        for n in range(per_session):
            for s in range(index, sessions, threads):
                accept(
                    stack.store,
                    stack.waker,
                    make_turn(f"{prefix}-{s}", n),
                    settings=stack.settings,
                    clock=time.time,
                )

    t0 = time.time()
    in_threads(threads, work)
    return time.time() - t0
