"""The terminal's pings on a real Redis: queued by `send`, published in order, flushed on close."""

from __future__ import annotations

import json
import time

import redis

from shared.pipeline.outbox import OutboxRow
from workers.delivery.cli import CliSender, channel_for


def _row(row_id: int, chat: str) -> OutboxRow:
    return OutboxRow(
        id=row_id,
        lane=f"cli:{chat}",
        platform="cli",
        chat_id=chat,
        text="hi",
        status="sent",
        attempts=1,
        created_at=0.0,
        turn_id=row_id * 10,
    )


def _received(pubsub: redis.client.PubSub, count: int, timeout: float = 5.0) -> list[dict]:
    got: list[dict] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        message = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.1)
        if message is not None:
            got.append(json.loads(message["data"]))
    return got


def test_pings_reach_the_waiting_terminal_in_order(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    listener = client.pubsub()
    listener.subscribe(channel_for("t1"))
    assert listener.get_message(timeout=1)["type"] == "subscribe"  # type: ignore[index]
    sender = CliSender(redis.Redis.from_url(redis_url))
    receipts = [sender.send(_row(n, "t1")) for n in range(1, 41)]
    sender.send(_row(99, "someone-else"))
    sender.close()
    assert [r.platform_message_id for r in receipts[:2]] == ["cli-1", "cli-2"]
    got = _received(listener, 41, timeout=2)
    assert got == [{"outbox_id": n, "turn_id": n * 10} for n in range(1, 41)]
    listener.close()


def test_a_broker_that_is_gone_costs_the_sender_nothing() -> None:
    sender = CliSender(redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2))
    receipt = sender.send(_row(1, "t1"))  # queued: the drain never waits for Redis
    sender.close()
    assert receipt.platform_message_id == "cli-1"
