"""Publishing a turn's live view: the reply's growing text and its tool rounds, on the turn's
Redis channel (`shared.live`), at a bounded rate and best effort.

The model thread calls `text`/`status`; a publish is at most every `interval` seconds (a
newer text replaces one still waiting, and `flush` sends the last). A failed publish turns
this turn's view off: the committed reply still reaches everyone through the outbox.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from shared.live import DONE, STATUS, TEXT, LiveEvent, channel_for

log = logging.getLogger(__name__)

MAX_PER_SECOND = 20.0


class Live(Protocol):
    """What the agent tells the live view; `NoLive` when nobody can watch."""

    def text(self, so_far: str) -> None: ...
    def status(self, what: str) -> None: ...
    def flush(self) -> None: ...
    def done(self) -> None: ...


class NoLive:
    def text(self, so_far: str) -> None:
        pass

    def status(self, what: str) -> None:
        pass

    def flush(self) -> None:
        pass

    def done(self) -> None:
        pass


class RedisLive:
    """One turn's publisher (one thread uses it: the turn's)."""

    def __init__(
        self,
        redis_client: Any,
        turn_id: int,
        *,
        per_second: float = MAX_PER_SECOND,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._redis = redis_client
        self._channel = channel_for(turn_id)
        self._interval = 1.0 / per_second
        self._clock = clock
        self._last = float("-inf")
        self._pending: LiveEvent | None = None
        self._broken = False
        self.published = 0

    def text(self, so_far: str) -> None:
        self._offer(LiveEvent(TEXT, so_far))

    def status(self, what: str) -> None:
        self._offer(LiveEvent(STATUS, what), now=True)

    def flush(self) -> None:
        if self._pending is not None:
            self._publish(self._pending)

    def done(self) -> None:
        self.flush()
        self._publish(LiveEvent(DONE))

    def _offer(self, event: LiveEvent, *, now: bool = False) -> None:
        if now or self._clock() - self._last >= self._interval:
            self._publish(event)
        else:
            self._pending = event

    def _publish(self, event: LiveEvent) -> None:
        self._pending = None
        if self._broken:
            return
        self._last = self._clock()
        try:
            self._redis.publish(self._channel, event.encode())
            self.published += 1
        except Exception as exc:  # the live view is a courtesy: the outbox carries the reply
            self._broken = True
            log.warning("live view of %s lost: %s", self._channel, exc)


def live_for(redis_client: Any | None, turn_id: int) -> Live:
    return NoLive() if redis_client is None else RedisLive(redis_client, turn_id)
