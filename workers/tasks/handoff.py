"""`hermes.sessions.handoff`: run one /handoff request (maintenance queue)."""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery

from shared.db import OperationalError
from shared.tasknames import HANDOFF
from workers.handoff import run_handoff
from workers.runtime import RuntimeHolder

log = logging.getLogger(__name__)


def register(app: Celery, runtimes: RuntimeHolder) -> None:
    @app.task(name=HANDOFF, bind=True, max_retries=20, ignore_result=True)
    def handoff_task(self: Any, handoff_id: int) -> dict[str, Any]:
        try:
            result = run_handoff(runtimes.get(), int(handoff_id))
        except OperationalError as exc:  # database busy past its timeout: try again soon
            log.warning("handoff %s hit a busy database: %s", handoff_id, exc)
            raise self.retry(countdown=1) from None
        if result.outcome == "missing":  # woken before the request committed
            raise self.retry(countdown=1)
        return {"handoff": handoff_id, "outcome": result.outcome, "error": result.error}
