"""`hermes up`: everything on this machine — broker, workers, exactly one beat, receivers."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import sys
from typing import IO, Any

import click
from rich.console import Console
from rich.table import Table

from producers.broker import broker_client, join_fleet
from producers.cli.app import App, fail, pass_app
from producers.maintenance import request_prune_in_background
from producers.stack.embedded_redis import EmbeddedRedis, EmbeddedRedisError
from producers.stack.supervisor import Supervisor
from shared.db import Store
from shared.fleet_registry import FleetMismatch, Heartbeat
from shared.platforms import registry
from shared.sdks import configured_platforms, sdk_problems
from shared.settings import Settings

COLOURS = ["cyan", "magenta", "green", "yellow", "blue", "red"]


def hermes_argv(*args: str) -> list[str]:
    """`hermes ARGS` as a child process. `-P`: the working directory is not put on sys.path,
    so a folder named shared/, workers/ or producers/ where the user runs hermes cannot
    shadow ours."""
    return [sys.executable, "-P", "-m", "producers.cli.main", *args]


def receivers(settings: Settings) -> tuple[list[str], dict[str, str]]:
    """Platforms whose receiver can start, and those left out with the reason.

    A platform with a token but an incomplete configuration (Slack without its signing
    secret, Socket Mode without an app token, …) is left out rather than started: its
    receiver would exit at once and the supervisor would restart it forever.
    """
    from producers.cli.plugins import _points

    if "gateway" not in _points():
        return [], {}
    from producers.gateway.serve import GatewayError, check, default_mode

    names: list[str] = []
    skipped: dict[str, str] = {}
    for name in registry.names():
        if not settings.platforms.of(name).configured:
            continue
        try:
            check(settings, default_mode(settings, name))
        except GatewayError as exc:
            skipped[name] = str(exc)
            continue
        names.append(name)
    return names, skipped


def _refuse_missing_sdks(settings: Settings) -> None:
    """Once, before anything starts: a configured platform whose SDK does not import would make
    its workers fail every delivery and its receiver restart forever."""
    problems = sdk_problems(configured_platforms(settings))
    for line in problems:
        click.echo(f"hermes up: {line}", err=True)
    if problems:
        sys.exit(1)


def _refuse_a_taken_port(settings: Settings) -> None:
    """Once, before anything starts: receivers on a port another stack (or program) holds
    would each exit at once and be restarted forever."""
    from producers.gateway.port import PortInUse, check

    try:
        problem = check(settings)
    except PortInUse as exc:
        problem = str(exc)
    if problem is not None:
        fail(f"hermes up: {problem}", 1)


def receiver_env(settings: Settings) -> dict[str, str]:
    """The receivers share the gateway port, so a scrape of /metrics reaches any one of them:
    they count in one directory of metric files and each answers with the sum over all."""
    path = settings.run_dir / "metrics" / "gateway"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True, mode=0o700)
    return {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(path)}


def _lock(settings: Settings) -> IO[str]:
    settings.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    handle = (settings.run_dir / "up.lock").open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        pid = handle.read().strip() or "?"
        fail(f"hermes up is already running for {settings.home} (pid {pid})", 1)
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


@click.command()
@click.option("--workers", "-w", type=click.IntRange(1, 64), help="Worker processes.")
@click.option("--concurrency", "-c", type=click.IntRange(1, 1024), help="Turns per worker.")
@click.option("--no-beat", is_flag=True, help="Do not start beat (another machine runs it).")
@pass_app
def up(app: App, workers: int | None, concurrency: int | None, no_beat: bool) -> None:
    """Run everything on this machine until Ctrl-C.

    Starts a private Redis under HERMES_HOME (unless HERMES_BROKER_URL is set), worker
    processes, exactly one beat, and a receiver for each platform that has credentials.
    """
    settings = app.settings
    console = Console(stderr=True, highlight=False)
    _refuse_missing_sdks(settings)
    store = app.store()  # create or upgrade state.db now, so a bad file stops us here
    store.check_writable()  # read-only or damaged: refused before anything starts
    lock = _lock(settings)
    started, skipped = receivers(settings)
    if started:
        _refuse_a_taken_port(settings)
    broker, heartbeat = _broker_and_fleet(settings, store)
    colours: dict[str, str] = {}

    def show(name: str, line: str) -> None:
        colour = colours.setdefault(name, COLOURS[len(colours) % len(COLOURS)])
        console.print(f"[{colour}]{name:>10} │[/] {line}", markup=True, soft_wrap=True)

    sup = Supervisor(show)
    count = workers or settings.workers.processes
    per_worker = str(concurrency or settings.workers.concurrency)
    base_port = settings.workers.metrics_port
    for index in range(1, count + 1):
        argv = hermes_argv("worker", "-c", per_worker, "-n", f"worker{index}@%h", "-l", "WARNING")
        if base_port is not None:  # one port each: worker N serves base + N - 1
            argv += ["--metrics-port", str(base_port + index - 1)]
        sup.add(f"worker-{index}", argv)
    if not no_beat:
        sup.add("beat", hermes_argv("beat", "-l", "WARNING"))
    shared_port = receiver_env(settings) if started else None
    for platform in started:
        sup.add(platform, hermes_argv("gateway", platform), env=shared_port)
    sup.start_all()
    producer = broker_client(settings)
    app._closers.append(producer.close)
    request_prune_in_background(settings, store, producer)
    _summary(console, settings, store.path, broker, sup)
    for platform, reason in skipped.items():
        console.print(
            f"[yellow]{platform} receiver not started:[/] {reason}", markup=True, soft_wrap=True
        )

    def on_signal(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        sup.watch()
    except KeyboardInterrupt:
        console.print("[bold]Stopping…[/] (waiting for running turns to finish)")
    finally:
        sup.stop()
        if heartbeat is not None:
            heartbeat.stop()
        if broker is not None:
            broker.stop()
        lock.close()
    console.print("[bold]Stopped.[/] Everything hermes up started has exited.")


def _broker_and_fleet(
    settings: Settings, store: Store
) -> tuple[EmbeddedRedis | None, Heartbeat | None]:
    """The embedded broker started (unless the fleet's is configured), then the fleet check:
    a store and a broker of different fleets stop everything here, with one line."""
    broker = (
        EmbeddedRedis(settings.run_dir, dies_with_parent=True)
        if settings.uses_embedded_broker
        else None
    )
    if broker is not None:
        try:
            broker.start()
        except EmbeddedRedisError as exc:
            fail(f"hermes up: {exc}", 2)
    try:
        return broker, join_fleet(settings, store, "up")
    except FleetMismatch as exc:
        if broker is not None:
            broker.stop()
        fail(f"hermes up: {exc}", 1)


def _summary(
    console: Console, settings: Settings, db: Any, broker: EmbeddedRedis | None, sup: Supervisor
) -> None:
    table = Table(title="hermes up", show_header=True, header_style="bold")
    table.add_column("role")
    table.add_column("pid", justify="right")
    table.add_column("where")
    if broker is not None:
        table.add_row("broker", str(broker.pid), f"{broker.url} (embedded Redis)")
    else:
        table.add_row("broker", "—", _redact(settings.resolved_broker_url))
    table.add_row("state", "—", str(db or _redact(settings.resolved_database_url)))
    for child in sup.children:
        table.add_row(child.name, str(child.pid), " ".join(child.argv[3:]))
    console.print(table)
    console.print("Ctrl-C stops everything. `hermes status` shows the queues.")


def _redact(url: str) -> str:
    """user:password@host → user:***@host, so credentials never reach the terminal or logs."""
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}"
