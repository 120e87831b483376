"""Asking a worker for the retention prune when a chat, `hermes up` or a receiver starts.

Beat's schedule runs the prune hourly at most; a machine that only ever runs short chats (or
restarts often) would otherwise never prune. So every start looks at the last run kept in
state.db and, when `sessions.auto_prune` is on and `sessions.min_interval_hours` has passed,
sends the same task beat sends, by name. The worker's sweep checks again under its lease, so
any number of starts at once still prune once per interval for the whole fleet; the start
itself only reads one value and publishes one message, and never waits for the prune.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from celery import Celery

from producers.broker import PUBLISH_RETRY
from shared.db import Store, meta
from shared.maintenance import PRUNE_LAST_RUN, prune_due
from shared.settings import Settings
from shared.tasknames import MAINTENANCE_QUEUE, PRUNE

log = logging.getLogger(__name__)

# A request nobody took within this long is dropped by the worker: a later start asks again.
REQUEST_EXPIRES = 3600.0


def prune_is_due(settings: Settings, store: Store, now: float) -> bool:
    """`sessions.auto_prune` is on and the last prune (state.db) is an interval ago or never."""
    cfg = settings.sessions
    if not cfg.auto_prune:
        return False
    with store.read() as conn:
        last = meta.get_meta(conn, PRUNE_LAST_RUN)
    return prune_due(float(last) if last else None, now, cfg.min_interval_hours)


def request_prune_if_due(
    settings: Settings, store: Store, producer: Celery, clock: Callable[[], float] = time.time
) -> bool:
    """Send the prune task when it is due; True if a request went out. Never raises: a start
    goes on whatever happens here (beat's schedule is still there)."""
    try:
        if not prune_is_due(settings, store, clock()):
            return False
        producer.send_task(
            PRUNE,
            queue=MAINTENANCE_QUEUE,
            expires=REQUEST_EXPIRES,
            ignore_result=True,
            retry=True,
            retry_policy=PUBLISH_RETRY,
        )
    except Exception as exc:
        log.warning("could not ask for the retention prune (%s); beat's schedule will", exc)
        return False
    log.info("retention prune is due: asked a worker for it")
    return True


def request_prune_in_background(
    settings: Settings, store: Store, producer: Celery, clock: Callable[[], float] = time.time
) -> threading.Thread:
    """`request_prune_if_due` on a thread of its own, so a start never waits on the broker."""
    thread = threading.Thread(
        target=request_prune_if_due,
        args=(settings, store, producer, clock),
        name="hermes-prune-request",
        daemon=True,
    )
    thread.start()
    return thread
