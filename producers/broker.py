"""Wake-ups by task name: producers never import the workers that run them."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from celery import Celery

from shared.db import Store
from shared.fleet_registry import Heartbeat, join
from shared.settings import Settings
from shared.tasknames import (
    AUTOTITLE,
    DELIVER,
    DELIVERY_QUEUE,
    DRAIN,
    HANDOFF,
    MAINTENANCE_QUEUE,
    TURNS_QUEUE,
)
from shared.wakeups import send_drains, send_wake

log = logging.getLogger(__name__)

# A receiver must ack the platform quickly even when the broker is down: try once, briefly.
FLEET_REDIS_TIMEOUT = 5.0  # seconds: the fleet check at start, then each heartbeat
PUBLISH_RETRY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}


def broker_client(settings: Settings) -> Celery:
    """A Celery app that only publishes (and pings workers); it defines no tasks."""
    app = Celery("hermes-producer", set_as_current=False)
    app.conf.update(
        broker_url=settings.resolved_broker_url,
        broker_connection_retry_on_startup=False,
        broker_connection_timeout=2,
        broker_connection_max_retries=1,
        task_serializer="json",
        accept_content=["json"],
        result_backend=None,
        task_ignore_result=True,
        task_send_sent_event=True,
    )
    return app


class BrokerWaker:
    """Publishes drain/flush wake-ups; returns False (and logs) when the broker is unreachable."""

    def __init__(self, app: Celery) -> None:
        self._app = app

    def _send(self, name: str, arg: str | int, queue: str, countdown: float | None) -> bool:
        options: dict[str, Any] = {"queue": queue, "retry": True, "retry_policy": PUBLISH_RETRY}
        if countdown:
            options["countdown"] = countdown
        try:
            self._app.send_task(name, args=[arg], **options)
        except Exception as exc:
            log.warning(
                "wake-up %s(%s) not sent (%s); the redrive sweep will find it", name, arg, exc
            )
            return False
        return True

    def drain(self, session_key: str, *, countdown: float | None = None) -> bool:
        return self._send(DRAIN, session_key, TURNS_QUEUE, countdown)

    def drain_many(self, session_keys: Sequence[str]) -> set[str]:
        """Wake-ups for `session_keys`, sent so that the receiver's cost stays flat as its batch
        grows: one key gets its drain task; several get one `hermes.turns.wake` task naming
        them all, and the worker that takes it sends a drain per key (workers/tasks/turns.py).
        A drain through Celery costs the receiver ~0.15-0.2 ms of CPU (the message, its
        task-sent event, ids); under load that was half of the receiver's work per request,
        and a fleet scales its workers, not its front door. The extra hop costs the batch's
        turns about a millisecond, and only when turns arrive faster than one transaction.

        All or nothing: if the publish fails none counts as sent (a duplicate wake-up is
        harmless), so their claims are let go and the redrive sweep finds them."""
        keys = list(dict.fromkeys(session_keys))
        if not keys:
            return set()
        try:  # nothing is sent until the batch ends, so there is nothing to retry before
            if len(keys) == 1:
                send_drains(self._app, keys)
            else:
                send_wake(self._app, keys)
        except Exception as exc:
            log.warning(
                "%d wake-ups not sent (%s); the redrive sweep will find them", len(keys), exc
            )
            return set()
        return set(keys)

    def deliver(self, lane: str, *, countdown: float | None = None) -> bool:
        return self._send(DELIVER, lane, DELIVERY_QUEUE, countdown)

    def autotitle(self, session_id: str) -> bool:
        return self._send(AUTOTITLE, session_id, MAINTENANCE_QUEUE, None)

    def handoff(self, handoff_id: int, *, countdown: float | None = None) -> bool:
        return self._send(HANDOFF, handoff_id, MAINTENANCE_QUEUE, countdown)


def broker_redis(settings: Settings, *, timeout: float | None = None) -> Any | None:
    """A plain Redis client on the broker (the terminal's reply channel, the fleet's refusal
    gate), or None when the broker is not Redis. Workers have their own (workers/runtime.py)."""
    import redis

    url = settings.resolved_broker_url
    if url.startswith("redis+socket://"):
        path = url.removeprefix("redis+socket://")
        return redis.Redis(unix_socket_path=path, socket_timeout=timeout)
    if url.startswith(("redis://", "rediss://")):
        return redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    return None


def join_fleet(settings: Settings, store: Store, role: str) -> Heartbeat | None:
    """Check that `store` and the broker belong to one fleet (shared.fleet_registry raises
    FleetMismatch, whose text is the one line to print), then show this process in the fleet
    until the heartbeat returned is stopped. None when the broker is not Redis."""
    client = broker_redis(settings, timeout=FLEET_REDIS_TIMEOUT)
    if client is None:
        return None
    try:
        return join(settings, store, client, role)
    except BaseException:
        client.close()
        raise
