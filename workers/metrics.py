"""A worker process's Prometheus metrics, and its `/metrics` endpoint (`workers.metrics_port`).

Counters and histograms are made per process in main (importing this module makes none). A
threads pool serves its own registry. A prefork pool's children write theirs to files in
PROMETHEUS_MULTIPROC_DIR (prometheus_client's multiprocess mode, chosen by that variable) and
the parent serves the sum of every child's. Either way the store's queue gauges are read on
each scrape (shared.metrics.StoreCollector).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from shared.db import Store
from shared.ports import Clock
from shared.usage import ModelCall

log = logging.getLogger(__name__)

TURN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)
MODEL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120)
WRITE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5)


class WorkerMetrics:
    """Everything a worker counts. `registry`: the one served by this process; None in
    multiprocess mode (the values live in files, summed at scrape)."""

    def __init__(self, registry: Any | None = None, *, private: bool = True) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        if registry is None and private:  # a twin that counts and is never served
            registry = CollectorRegistry(auto_describe=False)
        self.registry = registry
        kw: dict[str, Any] = {"registry": registry}
        self.turns = Counter(
            "hermes_turns_finished",
            "Turns finished, by platform and outcome (done, failed, cancelled, dead)",
            ["platform", "status"],
            **kw,
        )
        self.turn_seconds = Histogram(
            "hermes_turn_seconds",
            "One turn in the drain: claimed to committed (the model's time included)",
            ["platform"],
            buckets=TURN_BUCKETS,
            **kw,
        )
        self.wait_seconds = Histogram(
            "hermes_turn_wait_seconds",
            "A turn's wait: recorded to started",
            ["platform"],
            buckets=TURN_BUCKETS,
            **kw,
        )
        self.model_seconds = Histogram(
            "hermes_model_call_seconds",
            "One model call's latency",
            ["model", "kind"],
            buckets=MODEL_BUCKETS,
            **kw,
        )
        self.model_tokens = Counter(
            "hermes_model_tokens", "Tokens of model calls", ["model", "kind", "direction"], **kw
        )
        self.replies_sent = Counter("hermes_replies_sent", "Replies sent", ["platform"], **kw)
        self.send_errors = Counter(
            "hermes_send_errors",
            "Sends that failed: retry (transient) or undeliverable",
            ["platform", "kind"],
            **kw,
        )
        self.rate_limit_waits = Counter(
            "hermes_rate_limit_waits",
            "Sends held back by a rate limit or a platform's 429",
            ["platform"],
            **kw,
        )
        self.rate_limit_seconds = Counter(
            "hermes_rate_limit_wait_seconds", "Time sends were told to wait", ["platform"], **kw
        )
        self.leases_held = Gauge(
            "hermes_leases_held",
            "Session leases held by this worker",
            multiprocess_mode="livesum",
            **kw,
        )
        self.store_write_seconds = Histogram(
            "hermes_store_write_seconds",
            "One store write transaction, waiting for the write lock included",
            buckets=WRITE_BUCKETS,
            **kw,
        )

    def turn_committed(self, platform: str, status: str, calls: list[ModelCall]) -> None:
        self.turns.labels(platform, status).inc()
        self.model_calls(calls)

    def turn_timed(self, platform: str, received_at: float, started: float, now: float) -> None:
        """A turn's wait (recorded → started) and its run (started → committed)."""
        self.wait_seconds.labels(platform).observe(max(0.0, started - received_at))
        self.turn_seconds.labels(platform).observe(max(0.0, now - started))

    def model_calls(self, calls: list[ModelCall]) -> None:
        for call in calls:
            self.model_seconds.labels(call.model, call.kind).observe(call.latency_ms / 1000)
            tokens = self.model_tokens
            tokens.labels(call.model, call.kind, "input").inc(call.input_tokens)
            tokens.labels(call.model, call.kind, "output").inc(call.output_tokens)
            if call.cached_tokens:
                tokens.labels(call.model, call.kind, "cached").inc(call.cached_tokens)

    def watch_store(self, store: Store) -> None:
        store.observe_write = self.store_write_seconds.observe


def multiprocess_dir(run_dir: Path, name: str) -> Path:
    """A fresh directory for one process tree's metric files (left-overs of a previous run
    would be summed in)."""
    path = run_dir / "metrics" / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True, mode=0o700)
    return path


def serve(
    metrics: WorkerMetrics,
    *,
    host: str,
    port: int,
    store: Store | None,
    clock: Clock,
    multiprocess: bool,
) -> Any:
    """Start `/metrics` on host:port in a daemon thread; returns the server."""
    from prometheus_client import start_http_server

    from shared.metrics import registry

    served = registry(metrics.registry, store=store, clock=clock, multiprocess=multiprocess)
    server, _thread = start_http_server(port, addr=host, registry=served)
    log.warning("metrics on http://%s:%d/metrics", host, port)
    return server


def process_exited(pid: int) -> None:
    """A prefork child is gone: its live gauges stop counting."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid)
