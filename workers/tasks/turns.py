"""`hermes.turns.drain`: a wake-up for one session key (duplicates are harmless)."""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery

from shared.db import OperationalError
from shared.tasknames import DRAIN
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
