"""Beat's sweeps as tasks: reset, auto-title, retention prune, index merge, cron tick
(maintenance queue).

Each is idempotent: a double fire or a restart changes nothing the first run did not.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery

from shared.db import OperationalError
from shared.tasknames import (
    BACKUP,
    CRON_TICK,
    INDEX_MERGE,
    INDEX_PENDING,
    PRUNE,
    RESET_SWEEP,
    TITLE_SWEEP,
)
from workers.runtime import RuntimeHolder
from workers.sweeps import backup, cron, index, prune, reset, titles

log = logging.getLogger(__name__)


def register(app: Celery, runtimes: RuntimeHolder) -> None:
    options: dict[str, Any] = {"ignore_result": True, "bind": True}

    @app.task(name=RESET_SWEEP, **options)
    def reset_task(self: Any) -> dict[str, Any]:
        try:
            report = reset.sweep(runtimes.get())
        except OperationalError as exc:
            log.warning("reset sweep hit a busy database (%s); next beat retries", exc)
            return {"error": str(exc)}
        return {
            "ended": report.ended,
            "memory_turns": report.memory_turns,
            "busy": report.skipped_busy,
        }

    @app.task(name=TITLE_SWEEP, **options)
    def title_task(self: Any) -> dict[str, Any]:
        return {"titled": titles.sweep(runtimes.get())}

    @app.task(name=PRUNE, **options)
    def prune_task(self: Any) -> dict[str, Any]:
        report = prune.sweep(runtimes.get())
        return {
            "reason": report.reason,
            "sessions": report.sessions,
            "messages": report.messages,
            "pages_freed": report.pages_freed,
        }

    @app.task(name=INDEX_MERGE, **options)
    def index_task(self: Any) -> dict[str, Any]:
        report = index.sweep(runtimes.get())
        return {
            "reason": report.reason,
            "segments_before": report.segments_before,
            "segments_after": report.segments_after,
        }

    @app.task(name=INDEX_PENDING, **options)
    def pending_task(self: Any) -> dict[str, Any]:
        report = index.pending_sweep(runtimes.get())
        return {"reason": report.reason, "pages": report.pages}

    @app.task(name=BACKUP, **options)
    def backup_task(self: Any) -> dict[str, Any]:
        report = backup.sweep(runtimes.get())
        return {"reason": report.reason, "path": report.path, "removed": report.removed}

    @app.task(name=CRON_TICK, **options)
    def cron_task(self: Any) -> dict[str, Any]:
        return {"started": cron.tick(runtimes.get())}
