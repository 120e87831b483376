"""The terminal's sender: the reply is already in state.db; ping the waiting terminal."""

from __future__ import annotations

import json
import logging
import queue
import threading
from typing import Any

from shared.pipeline.outbox import OutboxRow
from workers.delivery.base import Sent

log = logging.getLogger(__name__)

BATCH = 256  # pings published in one round trip at most
_CLOSE = object()


def channel_for(chat_id: str) -> str:
    return f"hermes:cli:{chat_id}"


class CliSender:
    """A terminal reads its replies from the outbox; a Redis publish wakes it at once.

    The publish is a courtesy (the terminal polls too), so `send` only queues it: one thread
    per process publishes what has queued in one pipelined round trip, instead of every drain
    waiting for a round trip of its own.
    """

    platform = "cli"
    reads_store = True  # the terminal reads the outbox; the publish only saves it a poll

    def __init__(self, redis_client: Any | None) -> None:
        self._redis = redis_client
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def send(self, row: OutboxRow) -> Sent:
        if self._redis is not None:
            note = json.dumps({"outbox_id": row.id, "turn_id": row.turn_id})
            self._queue.put((channel_for(row.chat_id), note))
            self._start()
        return Sent(platform_message_id=f"cli-{row.id}")

    def _start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._publish_forever, name="hermes-cli-pings", daemon=True
                )
                self._thread.start()

    def _publish_forever(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            closing = _CLOSE in batch
            pings = [item for item in batch if item is not _CLOSE]
            if pings:
                self._publish(pings)
            if closing:
                return

    def _publish(self, pings: list[Any]) -> None:
        assert self._redis is not None
        try:
            pipe = self._redis.pipeline(transaction=False)
            for channel, note in pings:
                pipe.publish(channel, note)
            pipe.execute()
        except Exception as exc:  # the terminal polls too; a lost ping only slows it
            log.warning("could not notify %s terminal(s): %s", len(pings), exc)

    def close(self, timeout: float = 2.0) -> None:
        """Publish what is queued, then stop the publishing thread."""
        thread = self._thread
        if thread is not None and thread.is_alive():
            self._queue.put(_CLOSE)
            thread.join(timeout)
