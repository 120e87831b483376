"""One beat schedules per fleet: Celery's own scheduler, firing only while it holds a lock in
the broker's Redis; any other `hermes beat` (on this host or another) stands by and takes over
within `LOCK_SECONDS + LOOK_SECONDS` of the holder's death.

The lock is redis-py's `Lock` (a key set with NX and a time to live, renewed on every tick)
named by the fleet's id, which the database holds: fleets sharing one Redis never contend for
one lock, and hosts reaching one database by different addresses share it. Beat does not
trust it blindly: each tick first asks whether it still owns the lock, so a
holder that was paused or cut off past the time to live stands by as soon as it runs again,
and a lock wiped with the broker (FLUSHALL, a restarted Redis without persistence) is simply
taken again. A double fire in the instant between two ticks changes nothing: every scheduled
task is idempotent (the sweeps claim their work in the database).

The schedule itself stays in Celery's file under `HERMES_HOME/run` (it only remembers when
each entry last ran on this host); a beat that takes over runs every overdue entry once.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from celery.beat import PersistentScheduler
from redis.exceptions import LockError, RedisError

LOCK_PREFIX = "hermes:beat:lock:"  # + the fleet id (shared.store.fleet)
# How long a silent holder keeps the fleet's schedule, and how often every beat looks.
LOCK_SECONDS = 20.0
LOOK_SECONDS = 5.0

log = logging.getLogger(__name__)


class FleetScheduler(PersistentScheduler):  # type: ignore[misc]  # Celery ships no type hints
    """A PersistentScheduler that ticks only while this process holds the fleet's beat lock."""

    def __init__(self, *args: Any, redis_client: Any, fleet: str, **kwargs: Any) -> None:
        self._key = LOCK_PREFIX + fleet
        self._lock = redis_client.lock(self._key, timeout=LOCK_SECONDS, blocking=False)
        self._holding: bool | None = None  # unknown until the first look: log it either way
        kwargs["max_interval"] = min(kwargs.get("max_interval") or LOOK_SECONDS, LOOK_SECONDS)
        super().__init__(*args, **kwargs)

    def tick(self, *args: Any, **kwargs: Any) -> float:
        if not self._hold():
            return LOOK_SECONDS
        return float(min(super().tick(*args, **kwargs), LOOK_SECONDS))

    def _hold(self) -> bool:
        """Keep (renew) or take the lock; False when another beat holds it or Redis is away."""
        try:
            if self._lock.owned():
                self._lock.reacquire()
                held = True
            else:
                held = bool(self._lock.acquire(blocking=False))
        except (LockError, RedisError) as exc:
            # Lost between the look and the renewal, or no broker: nothing can be sent anyway.
            log.warning("beat: cannot hold the fleet's beat lock (%s); standing by", exc)
            held = False
        if held != self._holding:
            self._holding = held
            if held:
                log.info("beat: holds the fleet's beat lock (%s): scheduling", self._key)
            else:
                log.info("beat: another beat holds the fleet's beat lock: standing by")
        return held

    def close(self) -> None:
        super().close()
        if self._holding:
            # Expired or unreachable: its time to live frees it; else a standby takes over
            # at its next look.
            with contextlib.suppress(LockError, RedisError):
                self._lock.release()
            self._holding = False
