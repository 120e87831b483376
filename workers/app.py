"""The Celery app: JSON wake-ups, late acks, one prefetch, events on for Flower, three queues."""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery
from kombu.entity import Exchange, Queue

from shared.settings import Settings
from shared.tasknames import (
    ALL_QUEUES,
    AUTOTITLE,
    DELIVER,
    DELIVERY_QUEUE,
    DRAIN,
    HANDOFF,
    MAINTENANCE_QUEUE,
    TURNS_QUEUE,
)
from workers.metrics import WorkerMetrics
from workers.runtime import RuntimeHolder

log = logging.getLogger(__name__)


class WorkerWaker:
    """Wake-ups through the broker; a failure is logged and left to the redrive sweep."""

    def __init__(self, app: Celery) -> None:
        self._app = app

    def _send(self, name: str, arg: str | int, queue: str, countdown: float | None) -> bool:
        try:
            self._app.send_task(
                name, args=[arg], queue=queue, countdown=countdown, ignore_result=True
            )
        except Exception as exc:
            log.warning("could not send %s(%s): %s; redrive will pick it up", name, arg, exc)
            return False
        return True

    def drain(self, session_key: str, *, countdown: float | None = None) -> bool:
        return self._send(DRAIN, session_key, TURNS_QUEUE, countdown)

    def deliver(self, lane: str, *, countdown: float | None = None) -> bool:
        return self._send(DELIVER, lane, DELIVERY_QUEUE, countdown)

    def autotitle(self, session_id: str) -> bool:
        return self._send(AUTOTITLE, session_id, MAINTENANCE_QUEUE, None)

    def handoff(self, handoff_id: int, *, countdown: float | None = None) -> bool:
        return self._send(HANDOFF, handoff_id, MAINTENANCE_QUEUE, countdown)


def celery_config(settings: Settings) -> dict[str, Any]:
    return {
        "broker_url": settings.resolved_broker_url,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": {"visibility_timeout": 3600},
        "task_serializer": "json",
        "accept_content": ["json"],
        "result_backend": None,
        "task_ignore_result": True,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "worker_send_task_events": True,
        "task_send_sent_event": True,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "task_default_queue": TURNS_QUEUE,
        # Routing by name (a task's own `queue` attribute is deprecated in Celery 5).
        "task_routes": {
            "hermes.turns.*": {"queue": TURNS_QUEUE},
            "hermes.delivery.*": {"queue": DELIVERY_QUEUE},
            "hermes.maintenance.*": {"queue": MAINTENANCE_QUEUE},
            "hermes.sessions.*": {"queue": MAINTENANCE_QUEUE},
        },
        "task_queues": [Queue(name, Exchange(name), routing_key=name) for name in ALL_QUEUES],
        "worker_hijack_root_logger": False,
        "timezone": "UTC",
    }


class _HermesCelery(Celery):  # type: ignore[misc]  # Celery ships no type hints
    """Tasks belong to the app that defined them. Celery's default (`shared=True`) hands every
    task to every app finalised later in the process, so a second app's tasks would run the
    first app's closures (its settings and store) and Celery warns of duplicate names."""

    def task(self, *args: Any, **opts: Any) -> Any:
        opts.setdefault("shared", False)
        return super().task(*args, **opts)


def create_app(settings: Settings, metrics: WorkerMetrics | None = None) -> Celery:
    """A Celery app with hermes's tasks; the store and agent are built later, per process.
    `metrics`: what the worker's /metrics serves (else each process counts privately)."""
    from workers.tasks import flush, handoff, maintenance, sweeps, titles, turns

    app = _HermesCelery("hermes", set_as_current=False)
    app.conf.update(celery_config(settings))
    runtimes = RuntimeHolder(settings, WorkerWaker(app), metrics)
    app.hermes_runtimes = runtimes
    for module in (turns, flush, maintenance, titles, sweeps, handoff):
        module.register(app, runtimes)
    return app
