"""What every receiver shares: recording a turn off the event loop, and who may talk to the bot.

`Gateway.record` hands the turn to the event loop's Recorder (recorder.py: batched with the
turns that arrive meanwhile, written in a worker thread, since SQLite must never block the
event loop) and returns once the turn is committed: only then does a receiver ack.

Access: a platform with `allowed_users` set answers anyone else with one short refusal and
stores nothing. Refusals are rate-limited per (platform, user), once an hour for the whole
fleet, in the broker's Redis (SharedRefusalGate): receivers share a port and fleets run
many, and each used to refuse on its own. Without Redis, an in-process gate decides.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from producers.gateway.metrics import GatewayMetrics
from producers.gateway.recorder import Recorder
from producers.intake import Accepted, Before, accept
from shared.db import Store
from shared.ports import Clock, Waker
from shared.settings import PlatformSettings, Settings
from shared.turns import InboundTurn

log = logging.getLogger(__name__)

REFUSAL = "Sorry, this assistant is private."
REFUSAL_EVERY_SECONDS = 3600.0
REFUSAL_MEMORY = 10_000


class RefusalGate:
    """Says yes to the first refusal per key within `every` seconds (bounded memory)."""

    def __init__(self, every: float = REFUSAL_EVERY_SECONDS, clock: Clock = time.monotonic) -> None:
        self._every = every
        self._clock = clock
        self._lock = threading.Lock()
        self._last: OrderedDict[str, float] = OrderedDict()

    def should_refuse(self, key: str) -> bool:
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self._every:
                return False
            self._last[key] = now
            self._last.move_to_end(key)
            while len(self._last) > REFUSAL_MEMORY:
                self._last.popitem(last=False)
            return True


class SharedRefusalGate:
    """The fleet's RefusalGate: one refusal per key and period across every receiver process
    (they share a port, and a fleet runs many), kept in the broker's Redis. If Redis cannot
    be asked, this process's own gate decides (a second refusal beats a crash or silence)."""

    def __init__(self, client: Any, every: float = REFUSAL_EVERY_SECONDS) -> None:
        self._client = client
        self._every = every
        self._local = RefusalGate(every)

    def should_refuse(self, key: str) -> bool:
        try:
            return bool(
                self._client.set(f"hermes:refused:{key}", 1, nx=True, ex=max(1, int(self._every)))
            )
        except Exception as exc:  # the broker is down: the platform still gets its answer
            log.debug("refusal gate falls back to this process: %s", exc)
            return self._local.should_refuse(key)


def platform_settings(settings: Settings, platform: str) -> PlatformSettings:
    return settings.platforms.of(platform)


def is_allowed(settings: Settings, turn: InboundTurn) -> bool:
    allowed = platform_settings(settings, turn.platform).allowed_users
    return not allowed or (turn.user_id is not None and turn.user_id in allowed)


@dataclass
class Gateway:
    """One receiver process's dependencies, built once in main and passed to every route."""

    settings: Settings
    store: Store
    waker: Waker
    clock: Clock = time.time
    refusals: RefusalGate | SharedRefusalGate = field(default_factory=RefusalGate)
    _recorder: Recorder | None = field(default=None, repr=False)
    metrics: GatewayMetrics | None = None

    def record_now(self, turn: InboundTurn) -> Accepted:
        """Record synchronously (polling loops and tests); raises TurnRejected."""
        accepted = accept(self.store, self.waker, turn, settings=self.settings, clock=self.clock)
        if self.metrics is not None:
            self.metrics.turn(turn.platform, duplicate=accepted.duplicate)
        return accepted

    async def record(self, turn: InboundTurn, before: Before | None = None) -> Accepted:
        """Record in a worker thread, batched; returns once committed. Raises TurnRejected.
        `before`: the receiver's own write, committed with the turn, ahead of it."""
        accepted = await self._recorder_here().record(turn, before)
        if self.metrics is not None:
            self.metrics.turn(turn.platform, duplicate=accepted.duplicate)
        return accepted

    async def settled(self) -> None:
        """Wait until the turns and wake-ups queued on this event loop are written and sent."""
        if self._recorder is not None and self._recorder.loop is asyncio.get_running_loop():
            await self._recorder.settled()

    def _recorder_here(self) -> Recorder:
        """The running event loop's Recorder (made on first use: it belongs to that loop)."""
        loop = asyncio.get_running_loop()
        if self._recorder is None or self._recorder.loop is not loop:
            self._recorder = Recorder(self.store, self.waker, self.settings, self.clock)
        return self._recorder

    def refusal_for(self, turn: InboundTurn) -> str | None:
        """None when `turn` may be recorded; else the refusal to send, or "" to stay silent."""
        if is_allowed(self.settings, turn):
            return None
        who = turn.user_id or f"chat:{turn.chat_id}"
        log.info("refused %s user %s (not in allowed_users)", turn.platform, who)
        return REFUSAL if self.refusals.should_refuse(f"{turn.platform}:{who}") else ""
