"""`hermes.maintenance.redrive` (wake what lost its wake-up) and no-ops for benchmarks."""

from __future__ import annotations

import time
from typing import Any

from celery import Celery

from shared.tasknames import PING, PROBE, REDRIVE
from workers.redrive import redrive
from workers.runtime import RuntimeHolder


def register(app: Celery, runtimes: RuntimeHolder) -> None:
    @app.task(name=REDRIVE, ignore_result=True)
    def redrive_task() -> dict[str, Any]:
        result = redrive(runtimes.get())
        return {"drains": result.drains, "deliveries": result.deliveries, "dead": result.dead}

    @app.task(name=PING, ignore_result=True)
    def ping_task(sent_at: float = 0.0) -> float:
        return sent_at

    @app.task(name=PROBE, ignore_result=True)
    def probe_task(sent_at: float, report_to: str) -> None:
        """A bare task for bench/pipeline.py: RPUSH "<started> <sent>" to a list on the broker."""
        started = time.time()
        client = runtimes.get().redis
        if client is not None:
            client.rpush(report_to, f"{started!r} {sent_at!r}")
