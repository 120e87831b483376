"""Wake-ups that stop trying for a while when the broker is down, so acks stay fast.

A turn is safe once committed: a wake-up that is not sent is found by the redrive sweep. So
after a failed publish the receiver skips publishing for `pause` seconds (answering False,
like a failed send) instead of waiting on a dead broker for every request, then tries again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from producers.intake import BatchWaker
from shared.ports import Clock, Waker

log = logging.getLogger(__name__)

PAUSE_SECONDS = 5.0


class PausingWaker:
    def __init__(
        self, inner: Waker, *, pause: float = PAUSE_SECONDS, clock: Clock = time.monotonic
    ) -> None:
        self._inner = inner
        self._pause = pause
        self._clock = clock
        self._lock = threading.Lock()
        self._until = 0.0
        self.skipped = 0

    def _paused(self, count: int = 1) -> bool:
        with self._lock:
            if self._clock() < self._until:
                self.skipped += count
                return True
            return False

    def _result(self, sent: bool) -> bool:
        if not sent:
            with self._lock:
                self._until = self._clock() + self._pause
            log.warning(
                "broker unreachable: wake-ups paused for %.0f s (redrive covers them)", self._pause
            )
        return sent

    def drain(self, session_key: str, *, countdown: float | None = None) -> bool:
        if self._paused():
            return False
        return self._result(self._inner.drain(session_key, countdown=countdown))

    def drain_many(self, session_keys: Sequence[str]) -> set[str]:
        """Many drain wake-ups at once, batched by the inner waker if it can."""
        if self._paused(len(session_keys)):
            return set()
        if isinstance(self._inner, BatchWaker):
            sent = self._inner.drain_many(session_keys)
        else:
            sent = {key for key in session_keys if self._inner.drain(key)}
        self._result(len(sent) == len(set(session_keys)))
        return sent

    def deliver(self, lane: str, *, countdown: float | None = None) -> bool:
        if self._paused():
            return False
        return self._result(self._inner.deliver(lane, countdown=countdown))

    def autotitle(self, session_id: str) -> bool:
        if self._paused():
            return False
        return self._result(self._inner.autotitle(session_id))

    def handoff(self, handoff_id: int, *, countdown: float | None = None) -> bool:
        if self._paused():
            return False
        return self._result(self._inner.handoff(handoff_id, countdown=countdown))
