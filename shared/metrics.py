"""What every exporter shares: the store's queues read on scrape, and the exposition itself.

Receivers and workers each count their own events (producers/gateway/metrics.py,
workers/metrics.py); the fleet-wide gauges — turns waiting and running per platform, the
oldest waiting turn's age, replies waiting in the outbox — come from the store at scrape time
(two grouped reads over open rows only). prometheus_client is imported when a registry is
built, never at import: it picks its multiprocess mode from PROMETHEUS_MULTIPROC_DIR then.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from typing import Any

from shared.db import Store
from shared.pipeline import inbox, outbox
from shared.ports import Clock


class StoreCollector:
    """Queue gauges read from the store on each scrape."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    def describe(self) -> list[Any]:
        return []  # not described up front: nothing is read until a scrape

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        now = self._clock()
        with self._store.read() as conn:
            turns = inbox.open_by_platform(conn)
            pending = outbox.pending_by_platform(conn)
        waiting = GaugeMetricFamily(
            "hermes_turns_waiting", "Turns recorded and not yet started", labels=["platform"]
        )
        running = GaugeMetricFamily(
            "hermes_turns_running", "Turns a worker is running now", labels=["platform"]
        )
        oldest = GaugeMetricFamily(
            "hermes_oldest_turn_age_seconds",
            "Age of the oldest turn not yet finished",
            labels=["platform"],
        )
        for platform, counts in sorted(turns.items()):
            waiting.add_metric([platform], counts.waiting)
            running.add_metric([platform], counts.running)
            if counts.oldest_received_at is not None:
                oldest.add_metric([platform], max(0.0, now - counts.oldest_received_at))
        backlog = GaugeMetricFamily(
            "hermes_outbox_pending", "Replies waiting to be sent", labels=["platform"]
        )
        for platform, count in sorted(pending.items()):
            backlog.add_metric([platform], count)
        yield from (waiting, running, oldest, backlog)


def registry(own: Any | None, *, store: Store | None, clock: Clock, multiprocess: bool) -> Any:
    """The registry a scrape reads: this process's metrics (`own`), or every process's from the
    multiprocess directory, plus the store's gauges."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    if multiprocess or own is None:
        served = CollectorRegistry(auto_describe=False)
        if multiprocess:

            class Children(MultiProcessCollector):
                def collect(self) -> Any:
                    files = sized_files(self._path)
                    return self.merge(files, accumulate=True)  # type: ignore[no-untyped-call]

            Children(served)  # type: ignore[no-untyped-call]
    else:
        served = own
    if store is not None:
        served.register(StoreCollector(store, clock))
    return served


def sized_files(directory: str) -> list[str]:
    """The multiprocess directory's metric files, but for one a process has just created and
    not yet sized: prometheus_client makes a file, then sizes it, then maps it, and a scrape
    that read it at 0 bytes failed on it (struct.error: the whole scrape answered 500, seen
    when a prefork child took its first task). A file never goes back to 0 bytes once sized."""
    found = []
    for path in glob.glob(os.path.join(directory, "*.db")):
        try:
            if os.path.getsize(path) > 0:
                found.append(path)
        except FileNotFoundError:  # a dead child's live gauge, removed meanwhile
            continue
    return found


def exposition(served: Any) -> tuple[bytes, str]:
    """(body, content type) of one scrape."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return generate_latest(served), CONTENT_TYPE_LATEST
