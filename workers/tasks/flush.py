"""`hermes.delivery.flush`: send one chat lane's pending replies."""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery

from shared.db import OperationalError
from shared.tasknames import DELIVER
from workers.flush import flush
from workers.runtime import RuntimeHolder

log = logging.getLogger(__name__)


def register(app: Celery, runtimes: RuntimeHolder) -> None:
    @app.task(name=DELIVER, bind=True, max_retries=None, ignore_result=True)
    def deliver_task(self: Any, lane: str) -> dict[str, Any]:
        try:
            result = flush(runtimes.get(), lane)
        except OperationalError as exc:
            log.warning("flush of %s hit a busy database: %s", lane, exc)
            raise self.retry(countdown=2) from None
        return {"sent": result.sent, "reason": result.reason}
