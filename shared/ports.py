"""Ports the core calls out through; each has a real adapter and a cheap twin for tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

Clock = Callable[[], float]


class Waker(Protocol):
    """Sends wake-up messages. Losing one is harmless: the redrive sweep finds the work."""

    def drain(self, session_key: str, *, countdown: float | None = None) -> bool: ...

    def deliver(self, lane: str, *, countdown: float | None = None) -> bool: ...

    def autotitle(self, session_id: str) -> bool: ...

    def handoff(self, handoff_id: int, *, countdown: float | None = None) -> bool: ...


class RecordingWaker:
    """The cheap twin: remembers wake-ups instead of sending them."""

    def __init__(self) -> None:
        self.drains: list[tuple[str, float | None]] = []
        self.deliveries: list[tuple[str, float | None]] = []
        self.autotitles: list[str] = []
        self.handoffs: list[tuple[int, float | None]] = []

    def drain(self, session_key: str, *, countdown: float | None = None) -> bool:
        self.drains.append((session_key, countdown))
        return True

    def deliver(self, lane: str, *, countdown: float | None = None) -> bool:
        self.deliveries.append((lane, countdown))
        return True

    def autotitle(self, session_id: str) -> bool:
        self.autotitles.append(session_id)
        return True

    def handoff(self, handoff_id: int, *, countdown: float | None = None) -> bool:
        self.handoffs.append((handoff_id, countdown))
        return True
