"""A receiver's Prometheus metrics and `GET /metrics` on the gateway port.

`hermes up` runs one receiver process per platform on one port (SO_REUSEPORT), so a scrape
lands on any of them: there they count in files under PROMETHEUS_MULTIPROC_DIR (set by `hermes
up` for its receivers) and each answers with the sum over all. A lone `hermes gateway`
serves its own registry. The store's queue gauges are read on each scrape, in a thread.
"""

from __future__ import annotations

from typing import Any

from anyio import to_thread
from starlette.requests import Request
from starlette.responses import Response

from shared.db import Store
from shared.metrics import exposition, registry
from shared.ports import Clock


class GatewayMetrics:
    def __init__(self, *, multiprocess: bool = False) -> None:
        from prometheus_client import CollectorRegistry, Counter

        self.multiprocess = multiprocess
        self.registry = None if multiprocess else CollectorRegistry(auto_describe=False)
        self.accepted = Counter(
            "hermes_turns_accepted",
            "Turns recorded in the inbox (acked to the platform), by platform",
            ["platform"],
            registry=self.registry,
        )
        self.duplicates = Counter(
            "hermes_turns_duplicate",
            "Redelivered events that were already recorded, by platform",
            ["platform"],
            registry=self.registry,
        )
        self._served: Any | None = None

    def turn(self, platform: str, *, duplicate: bool) -> None:
        (self.duplicates if duplicate else self.accepted).labels(platform).inc()

    def endpoint(self, store: Store, clock: Clock) -> Any:
        """The `GET /metrics` route's handler."""
        served = registry(self.registry, store=store, clock=clock, multiprocess=self.multiprocess)

        async def metrics(request: Request) -> Response:
            body, content_type = await to_thread.run_sync(exposition, served)
            return Response(body, media_type=content_type)

        return metrics
