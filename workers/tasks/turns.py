"""`hermes.turns.drain`: a wake-up for one session key (duplicates are harmless), and
`hermes.turns.wake`: a receiver's batch of them, fanned out here as a drain per key."""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery

from shared.db import OperationalError
from shared.tasknames import DRAIN, WAKE
from shared.wakeups import send_drains
from workers.drain import drain
from workers.runtime import RuntimeHolder

log = logging.getLogger(__name__)


def register(app: Celery, runtimes: RuntimeHolder) -> None:
    @app.task(name=DRAIN, bind=True, max_retries=None, ignore_result=True)
    def drain_task(self: Any, session_key: str) -> dict[str, Any]:
        try:
            result = drain(runtimes.get(), session_key)
        except OperationalError as exc:  # database busy past its timeout: try again soon
            log.warning("drain of %s hit a busy database: %s", session_key, exc)
            raise self.retry(countdown=2) from None
        return {"ran": result.ran, "reason": result.reason}

    @app.task(name=WAKE, bind=True, max_retries=None, ignore_result=True)
    def wake_task(self: Any, session_keys: list[str]) -> dict[str, int]:
        """A drain task per key. If the broker refuses, the whole batch is retried (late ack):
        a key woken twice costs nothing, and redrive finds any key whose wake-up was lost."""
        keys = [key for key in session_keys if isinstance(key, str)]
        try:
            send_drains(app, keys)
        except Exception as exc:
            log.warning("fan-out of %d wake-ups failed: %s; retrying", len(keys), exc)
            raise self.retry(countdown=2) from None
        return {"woken": len(keys)}
