"""Wake-ups by task name: producers never import the workers that run them."""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery

from shared.settings import Settings
from shared.tasknames import (
    AUTOTITLE,
    DELIVER,
    DELIVERY_QUEUE,
    DRAIN,
    MAINTENANCE_QUEUE,
    TURNS_QUEUE,
)

log = logging.getLogger(__name__)

# A receiver must ack the platform quickly even when the broker is down: try once, briefly.
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

    def _send(self, name: str, arg: str, queue: str, countdown: float | None) -> bool:
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

    def deliver(self, lane: str, *, countdown: float | None = None) -> bool:
        return self._send(DELIVER, lane, DELIVERY_QUEUE, countdown)

    def autotitle(self, session_id: str) -> bool:
        return self._send(AUTOTITLE, session_id, MAINTENANCE_QUEUE, None)
