"""`hermes.sessions.autotitle`: title a session after its first exchange (maintenance queue)."""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery

from shared.db import OperationalError
from shared.tasknames import AUTOTITLE
from workers.agent.titles import autotitle
from workers.runtime import RuntimeHolder

log = logging.getLogger(__name__)


def register(app: Celery, runtimes: RuntimeHolder) -> None:
    @app.task(name=AUTOTITLE, bind=True, max_retries=5, ignore_result=True)
    def autotitle_task(self: Any, session_id: str) -> dict[str, Any]:
        try:
            outcome = autotitle(runtimes.get(), session_id)
        except OperationalError as exc:  # database busy past its timeout: try again soon
            log.warning("auto-title of %s hit a busy database: %s", session_id, exc)
            raise self.retry(countdown=2) from None
        return {"session_id": session_id, "outcome": outcome}
