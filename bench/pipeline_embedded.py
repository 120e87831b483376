"""Phase 3, the embedded stack: sequential round trips over the private Redis socket, hop by
hop, beside bare task hops on the same broker."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import Children, log, percentiles
from bench.pipeline_stack import Pool, Stack, worker_env
from bench.pipeline_turns import exactly_once_ok, make_turn, max_turn_id, order_ok, turn_times
from producers.broker import PUBLISH_RETRY
from producers.intake import accept
from producers.stack.embedded_redis import EmbeddedRedis
from shared.settings import load_settings
from shared.tasknames import PROBE, TURNS_QUEUE
from workers.delivery.cli import channel_for


def embedded_hops(stack: Stack, count: int, warm: int = 5) -> dict[str, Any]:
    """Sequential round trips on the embedded socket: accept → the terminal's reply ping."""
    chat = f"e{uuid.uuid4().hex[:6]}"
    pubsub = stack.redis.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(channel_for(chat))
    round_trips: list[float] = []
    after = max_turn_id(stack.store)
    measured_after = after
    for n in range(warm + count):
        if n == warm:
            measured_after = max_turn_id(stack.store)
        t0 = time.time()
        got = accept(
            stack.store, stack.waker, make_turn(chat, n), settings=stack.settings, clock=time.time
        )
        deadline = time.monotonic() + 10
        while True:
            message = pubsub.get_message(timeout=max(0.0, deadline - time.monotonic()))
            if message is not None and json.loads(message["data"])["turn_id"] == got.turn_id:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"no reply ping for turn {got.turn_id} within 10 s")
        if n >= warm:
            round_trips.append(time.time() - t0)
    pubsub.close()
    times = turn_times(stack.store, measured_after)
    hops = {
        "accept_to_start_ms": percentiles([t.started - t.received for t in times if t.started]),
        "start_to_done_ms": percentiles(
            [f - s for t in times if (f := t.finished) and (s := t.started)]
        ),
        "done_to_sent_ms": percentiles(
            [t.sent - t.finished for t in times if t.sent and t.finished]
        ),
    }
    bare: list[float] = []
    bare_rt: list[float] = []
    report_to = f"bench:hop:{uuid.uuid4().hex}"
    for n in range(warm + count):
        t0 = time.time()
        stack.app.send_task(
            PROBE, args=[t0, report_to], queue=TURNS_QUEUE, retry=True, retry_policy=PUBLISH_RETRY
        )
        popped = stack.redis.blpop([report_to], timeout=10)
        if popped is None:
            raise RuntimeError("a bare probe did not run within 10 s")
        started, sent = map(float, popped[1].split())
        if n >= warm:
            bare.append(started - sent)
            bare_rt.append(time.time() - t0)
    return {
        "turns": count,
        "order_ok": order_ok(times),
        "exactly_once_ok": exactly_once_ok(stack.store, measured_after),
        "round_trip_ms": percentiles(round_trips),
        "hops": hops,
        "bare_publish_to_start_ms": percentiles(bare),
        "bare_round_trip_ms": percentiles(bare_rt),
    }


def embedded_phase(
    children: Children, work: Path, pool: Pool, hops: int, database_url: str | None = None
) -> dict[str, Any]:
    home = work / "embedded"
    env = worker_env(home, None, 0, database_url)
    settings = load_settings(env)
    broker = EmbeddedRedis(settings.run_dir)
    broker.start()
    try:
        stack = Stack(children, home, env, pool)
        try:
            log(f"embedded: Redis on {broker.socket_path}; starting workers")
            stack.start_workers()
            log(f"embedded: {hops} sequential turns and bare hops")
            result = embedded_hops(stack, hops)
        finally:
            stack.close()
    finally:
        broker.stop()
    return result
