"""Per-process resources of a worker, built lazily in the process that uses them (after fork)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from shared import media_objects
from shared.db import Store, open_store
from shared.media_objects import MediaObjects
from shared.ports import Clock, Waker
from shared.pricing import Pricing
from shared.settings import Settings
from workers.agent.base import Agent
from workers.agent.factory import build_agent
from workers.delivery.registry import SenderRegistry, build_senders
from workers.metrics import WorkerMetrics
from workers.renewer import Renewer

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    settings: Settings
    store: Store
    agent: Agent
    senders: SenderRegistry
    waker: Waker
    clock: Clock
    renewer: Renewer
    redis: Any | None = None
    metrics: WorkerMetrics = field(default_factory=WorkerMetrics)

    @property
    def lease_ttl(self) -> float:
        return self.settings.pipeline.lease_seconds

    @cached_property
    def pricing(self) -> Pricing:
        """The price table the usage ledger's costs come from (`pricing:` over the defaults)."""
        return Pricing(self.settings.pricing)

    @cached_property
    def media_objects(self) -> MediaObjects | None:
        """The object store holding attachments' bytes (`media.url`); None: the database."""
        return media_objects.from_settings(self.settings.media)

    def holder(self) -> str:
        return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"

    def now_datetime(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)

    def close(self) -> None:
        self.renewer.close()
        self.senders.close()
        self.store.close()
        if self.redis is not None:
            self.redis.close()


def broker_redis(settings: Settings, *, timeout: float | None = None) -> Any | None:
    """A Redis client on the broker (terminal pings, the beat lock, the fleet's registry), or
    None when the broker is not Redis."""
    import redis

    url = settings.resolved_broker_url
    if url.startswith("redis+socket://"):
        path = url.removeprefix("redis+socket://")
        return redis.Redis(unix_socket_path=path, socket_timeout=timeout)
    if url.startswith(("redis://", "rediss://")):
        return redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    return None


def build_runtime(
    settings: Settings,
    waker: Waker,
    *,
    clock: Clock = time.time,
    metrics: WorkerMetrics | None = None,
) -> Runtime:
    store = open_store(settings.resolved_database_url)
    try:
        store.check_writable()  # read-only or damaged: a worker must not start on it
    except BaseException:
        store.close()
        raise
    client = broker_redis(settings)
    metrics = metrics or WorkerMetrics()
    metrics.watch_store(store)
    return Runtime(
        settings=settings,
        store=store,
        agent=build_agent(settings, store),
        senders=build_senders(settings, client),
        waker=waker,
        clock=clock,
        renewer=Renewer(store, clock, settings.pipeline.lease_seconds),
        redis=client,
        metrics=metrics,
    )


class RuntimeHolder:
    """One Runtime per process: built on first use, rebuilt if the process forked since."""

    def __init__(
        self, settings: Settings, waker: Waker, metrics: WorkerMetrics | None = None
    ) -> None:
        self._settings = settings
        self._waker = waker
        self._metrics = metrics
        self._runtime: Runtime | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def get(self) -> Runtime:
        if self._runtime is None or self._pid != os.getpid():
            with self._lock:
                if self._runtime is None or self._pid != os.getpid():
                    self._runtime = build_runtime(
                        self._settings, self._waker, metrics=self._metrics
                    )
                    self._pid = os.getpid()
        return self._runtime

    def close(self) -> None:
        if self._runtime is not None and self._pid == os.getpid():
            self._runtime.close()
        self._runtime = None
