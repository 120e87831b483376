"""Running one receiver process: the gateway app on `gateway.host:gateway.port`, plus its platform's
long-lived connection (Telegram long polling, Slack Socket Mode, the Discord gateway), which its
receiver plug-in (producers/gateway/plugin.py) provides.

The listening socket is bound with SO_REUSEPORT, so the one receiver process per platform that
`hermes up` starts can all serve the same app on the same port; port.py makes sure only
receivers of the same stack do. Everything runs on one event
loop; when any part stops (Ctrl-C, SIGTERM, a failed login) the rest is stopped too.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from producers.broker import BrokerWaker, broker_client, broker_redis, join_fleet
from producers.gateway.app import create_app
from producers.gateway.deps import Gateway, SharedRefusalGate
from producers.gateway.metrics import GatewayMetrics
from producers.gateway.pausing_waker import PausingWaker
from producers.gateway.plugin import GatewayError, conf_of, receiver_plugin
from producers.gateway.port import PortInUse, claim
from producers.maintenance import request_prune_in_background
from shared.db import open_store
from shared.fleet_registry import FleetMismatch
from shared.platforms import registry
from shared.redact import install_redaction, secrets_of
from shared.sdks import RECEIVER, missing_sdk
from shared.settings import Settings

log = logging.getLogger(__name__)

T = TypeVar("T")
REFUSAL_REDIS_TIMEOUT = 0.5  # seconds: a refusal is never worth blocking the event loop longer
GC_YOUNG_THRESHOLD = 7000  # allocations between collections of the youngest generation

__all__ = ["GatewayError", "Mode", "check", "default_mode", "run", "serve"]


@dataclass(frozen=True, slots=True)
class Mode:
    """What `hermes gateway PLATFORM` runs: the platform and its plug-in's options (Telegram's
    `polling` and `webhook_url`, Slack's `socket_mode`, …)."""

    platform: str
    options: Mapping[str, Any] = field(default_factory=dict)


def default_mode(settings: Settings, platform: str, **given: Any) -> Mode:
    """The mode `hermes gateway PLATFORM` runs in: the options given, else the configuration."""
    described = registry.get(platform)
    plugin = receiver_plugin(described)
    return Mode(platform, plugin.options(conf_of(settings, described), given))


def check(settings: Settings, mode: Mode) -> None:
    described = registry.get(mode.platform)
    conf = conf_of(settings, described)
    if not conf.enabled:
        raise GatewayError(f"platforms.{mode.platform}.enabled is false")
    if conf.token is None:
        raise GatewayError(f"platforms.{mode.platform}.token is not set")
    receiver_plugin(described).check(conf, mode.options)


def listen(host: str, port: int) -> socket.socket:
    """A listening socket several receiver processes can share (SO_REUSEPORT)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        # Accepted connections inherit it: an answer's headers and body go out as two writes,
        # and with Nagle on, the second waits for the peer's delayed ACK (~40 ms per ack).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise GatewayError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


def _server(app: Any, settings: Settings) -> Any:
    import uvicorn

    from producers.gateway.timeouts import deadline_protocol

    class Server(uvicorn.Server):
        """uvicorn without its own signal handling: `serve` stops every part on a signal."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    # log_config=None: uvicorn builds no handlers of its own, so its error and access lines go
    # through the root handlers, which carry the redaction filter; its loggers follow the
    # level `hermes gateway -l` set (access lines at INFO and below). The app's lifespan sends
    # the wake-ups still queued for acked turns once the connections are closed. httptools
    # parses HTTP in C: h11, uvicorn's pure-Python parser, costs more than a bare answer;
    # the protocol is it with deadlines on reading a request's head and body.
    config = uvicorn.Config(
        app,
        http=deadline_protocol(settings.gateway),
        log_config=None,
        log_level=None,
        access_log=logging.getLogger("uvicorn.access").isEnabledFor(logging.INFO),
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    return Server(config)


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run `main` on uvloop: libuv's event loop, with less overhead per request than asyncio's
    own (the gateway answers thousands a second from one thread)."""
    import uvloop

    return uvloop.run(main)


def _on_signals(stop: Callable[[], None]) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop)
        except (RuntimeError, ValueError):  # not the main thread (tests): the caller stops us
            return


async def serve(gateway: Gateway, mode: Mode, sock: socket.socket) -> None:
    """Serve the app on `sock` plus the platform's connection until a signal or a failure."""
    server = _server(create_app(gateway), gateway.settings)
    described = registry.get(mode.platform)
    plugin, conf = receiver_plugin(described), conf_of(gateway.settings, described)
    await plugin.starting(gateway, conf, mode.options)
    # What is loaded by now (modules, settings, the app, the store's statements) lives as long
    # as the process: kept out of the collector's way, a full collection no longer walks those
    # hundreds of thousands of objects (~4% of a receiver's CPU under load, in perf).
    gc.freeze()
    # A request leaves a few hundred containers behind until it is answered; at Python's
    # default of 700 the youngest generation was collected every few requests, each time
    # walking every request in flight (~2.5% of the CPU in perf). Collected ten times less
    # often, a request's objects are mostly gone before a collection sees them.
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    http = asyncio.create_task(server.serve(sockets=[sock]), name="http")
    tasks = [http]
    extra = plugin.connection(gateway, conf, mode.options)
    if extra is not None:
        tasks.append(asyncio.create_task(extra, name=mode.platform))

    def stop() -> None:
        server.should_exit = True
        for task in tasks:
            if task is not http:
                task.cancel()

    _on_signals(stop)
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop()
        results = await asyncio.gather(*tasks, return_exceptions=True)
    for task, result in zip(tasks, results, strict=True):
        if isinstance(result, Exception):
            what = "the HTTP server" if task is http else f"the {mode.platform} connection"
            raise GatewayError(f"{what} stopped: {type(result).__name__}: {result}")


def run(settings: Settings, mode: Mode) -> None:
    """`hermes gateway <platform>`: serve until SIGINT/SIGTERM."""
    check(settings, mode)
    problem = missing_sdk(mode.platform, [RECEIVER])
    if problem is not None:
        raise GatewayError(problem)
    install_redaction(secrets_of(settings))
    try:
        claimed = claim(settings, listen)  # only receivers of this stack share the port
    except PortInUse as exc:
        raise GatewayError(str(exc)) from None
    sock = claimed.sock
    try:
        store = open_store(settings.resolved_database_url)
        try:
            store.check_writable()  # read-only or damaged: refused before receiving anything
            heartbeat = join_fleet(settings, store, f"gateway {mode.platform}")
        except FleetMismatch as exc:
            store.close()
            raise GatewayError(str(exc)) from None
        except BaseException:
            store.close()
            raise
    except BaseException:
        sock.close()
        claimed.release()
        raise
    try:
        producer = broker_client(settings)
        waker = PausingWaker(BrokerWaker(producer))
        request_prune_in_background(settings, store, producer)
        # `hermes up` sets the variable for receivers that share a port (metrics.py).
        metrics = GatewayMetrics(multiprocess="PROMETHEUS_MULTIPROC_DIR" in os.environ)
        gateway = Gateway(settings, store, waker, time.time, metrics=metrics)
        shared = broker_redis(settings, timeout=REFUSAL_REDIS_TIMEOUT)
        if shared is not None:
            gateway.refusals = SharedRefusalGate(shared)
        log.warning("hermes gateway %s on http://%s:%d", mode.platform, *sock.getsockname()[:2])
        run_loop(serve(gateway, mode, sock))
    finally:
        if heartbeat is not None:
            heartbeat.stop()
        sock.close()
        claimed.release()
        store.close()
