"""Phase 2, a slow model: sessions run in parallel while each session's turns run one at a time,
as a burst (everything enqueued at once) and as conversations (each turn after its reply)."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import redis
from sqlalchemy import text

from bench.common import Children, log
from bench.pipeline_stack import Pool, Sizes, Stack, worker_env
from bench.pipeline_turns import make_turn, max_turn_id, produce, summarise, turn_times, wait_for
from producers.intake import accept

POLL = 0.05
SLOW_TARGET = 1.5


def slow_burst(stack: Stack, sessions: int, per_session: int, latency: float) -> dict[str, Any]:
    """Every turn of every session enqueued at once: sessions run in parallel, turns serially."""
    after = max_turn_id(stack.store)
    enqueue_s = produce(stack, f"b{uuid.uuid4().hex[:6]}", sessions, per_session)
    wait_for(stack.store, after, sessions * per_session, delivered=True, timeout=600)
    result = _slow_result(stack, after, sessions, per_session, latency)
    result["enqueue_s"] = round(enqueue_s, 3)
    return result


def slow_conversation(
    stack: Stack, sessions: int, per_session: int, latency: float
) -> dict[str, Any]:
    """Each session sends its next turn once the previous reply is delivered, like a person."""
    after = max_turn_id(stack.store)
    run = uuid.uuid4().hex[:6]
    sent_upto = dict.fromkeys(range(sessions), 0)
    by_chat = {f"c{run}-{s}": s for s in range(sessions)}

    def send(chat: str, n: int) -> None:
        accept(
            stack.store, stack.waker, make_turn(chat, n), settings=stack.settings, clock=time.time
        )

    seen: set[int] = set()
    deadline = time.monotonic() + 600
    with ThreadPoolExecutor(stack.producers) as pool:
        pending = [pool.submit(send, chat, 0) for chat in by_chat]
        while len(seen) < sessions * per_session and time.monotonic() < deadline:
            time.sleep(POLL / 5)
            with stack.store.read() as conn:
                rows = conn.execute(
                    text(
                        "SELECT turn_id, chat_id FROM outbox WHERE turn_id > :a AND status = 'sent'"
                    ),
                    {"a": after},
                ).all()
            for turn_id, chat in rows:
                if turn_id in seen:
                    continue
                seen.add(turn_id)
                s = by_chat[chat]
                sent_upto[s] += 1
                if sent_upto[s] < per_session:
                    pending.append(pool.submit(send, chat, sent_upto[s]))
        for future in pending:
            future.result()
    return _slow_result(stack, after, sessions, per_session, latency)


def _slow_result(
    stack: Stack, after: int, sessions: int, per_session: int, latency: float
) -> dict[str, Any]:
    times = turn_times(stack.store, after)
    result = summarise(times, stack.store, after)
    ideal = per_session * latency
    first = min(t.received for t in times)
    delivered = max((t.sent for t in times if t.sent), default=float("nan")) - first
    result.update(
        sessions=sessions,
        turns_per_session=per_session,
        ideal_s=ideal,
        elapsed_delivered_s=round(delivered, 3),
        ratio=round(result["elapsed_s"] / ideal, 3),
        ratio_delivered=round(delivered / ideal, 3),
        met=result["elapsed_s"] / ideal <= SLOW_TARGET,
    )
    for key in ("turns_per_s", "delivered_per_s"):
        result.pop(key)
    return result


def slow_phase(
    children: Children,
    work: Path,
    broker: str,
    pool: Pool,
    producers: int,
    sizes: Sizes,
    latency: float,
    database_url: str | None = None,
) -> dict[str, Any]:
    home = work / "slow"
    redis.Redis.from_url(broker).flushdb()
    env = worker_env(home, broker, latency * 1000, database_url)
    stack = Stack(children, home, env, pool, producers)
    try:
        log(f"slow model ({latency:g} s): starting workers")
        stack.start_workers()
        n, k = sizes.slow_sessions, sizes.slow_per_session
        log(f"burst: {n} sessions x {k} turns enqueued at once")
        burst = slow_burst(stack, n, k, latency)
        log(f"  {burst['elapsed_s']} s for ideal {burst['ideal_s']} s")
        log(f"conversation: {n} sessions x {k} turns, each after the previous reply")
        talk = slow_conversation(stack, n, k, latency)
        log(f"  {talk['elapsed_s']} s for ideal {talk['ideal_s']} s")
    finally:
        stack.close()
    return {"latency_s": latency, "burst": burst, "conversation": talk}
