"""A receiver's wake-ups pause after a broker failure (acks stay fast; redrive covers them)."""

from __future__ import annotations

from producers.gateway.pausing_waker import PausingWaker
from shared.ports import RecordingWaker


class Flaky(RecordingWaker):
    def __init__(self) -> None:
        super().__init__()
        self.up = True
        self.calls = 0

    def drain(self, session_key: str, *, countdown: float | None = None) -> bool:
        self.calls += 1
        return self.up and super().drain(session_key, countdown=countdown)


def test_a_failed_publish_pauses_publishing_then_it_tries_again() -> None:
    now = [0.0]
    inner = Flaky()
    waker = PausingWaker(inner, pause=5.0, clock=lambda: now[0])
    assert waker.drain("a")
    inner.up = False
    assert not waker.drain("b")  # tried, failed: paused
    assert not waker.drain("c") and not waker.deliver("lane") and not waker.autotitle("s")
    assert inner.calls == 2 and waker.skipped == 3
    now[0] = 5.1
    inner.up = True
    assert waker.drain("d")
    assert [key for key, _ in inner.drains] == ["a", "d"]


def test_a_failed_batch_pauses_publishing_too() -> None:
    now = [0.0]
    inner = Flaky()
    waker = PausingWaker(inner, pause=5.0, clock=lambda: now[0])
    assert waker.drain_many(["a", "b"]) == {"a", "b"}
    inner.up = False
    assert waker.drain_many(["c", "d"]) == set()  # tried, failed: paused
    assert waker.drain_many(["e", "f"]) == set() and not waker.drain("g")
    assert inner.calls == 4 and waker.skipped == 3
    now[0] = 5.1
    inner.up = True
    assert waker.drain_many(["h"]) == {"h"}
    assert [key for key, _ in inner.drains] == ["a", "b", "h"]
