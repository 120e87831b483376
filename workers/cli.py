"""`hermes worker` and `hermes beat`: one role each, for fleets (and for `hermes up`)."""

from __future__ import annotations

import copy
import functools
import logging
import os
import socket
import sys
import time
from typing import Any

import click

import beat_schedule
from shared import media_objects
from shared.db import OperationalError, StoreError, open_store
from shared.fleet_registry import FleetMismatch, Heartbeat, join
from shared.sdks import SENDER, configured_platforms, sdk_problems
from shared.settings import Settings, load_settings
from shared.tasknames import ALL_QUEUES
from workers.app import create_app
from workers.beat_lock import FleetScheduler
from workers.metrics import WorkerMetrics, multiprocess_dir, process_exited, serve
from workers.runtime import broker_redis

log = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
FLEET_REDIS_TIMEOUT = 5.0  # seconds: the fleet check at start, then each heartbeat


def _settings(ctx: click.Context) -> Settings:
    """The settings the `hermes` root command read (its context object), or read them now."""
    settings = getattr(ctx.obj, "settings", None)
    return settings if isinstance(settings, Settings) else load_settings()


def beat_config(settings: Settings) -> dict[str, dict[str, Any]]:
    """beat_schedule.SCHEDULE with the periods the settings override."""
    entries: dict[str, dict[str, Any]] = copy.deepcopy(beat_schedule.SCHEDULE)
    periods = {
        "redrive": settings.pipeline.redrive_seconds,
        "cron": settings.maintenance.cron_seconds,
        "reset": settings.maintenance.reset_seconds,
        "titles": settings.maintenance.title_seconds,
        "prune": settings.maintenance.prune_seconds,
        "index_merge": settings.maintenance.index_merge_seconds,
        "index_pending": settings.maintenance.index_pending_seconds,
    }
    for name, period in periods.items():
        entries[name]["schedule"] = period
        entries[name]["options"]["expires"] = period
    hours = settings.maintenance.backup_hours
    if hours:
        entries["backup"]["schedule"] = hours * 3600
        entries["backup"]["options"]["expires"] = min(hours * 3600, 3600.0)
    else:
        del entries["backup"]
    if not settings.resolved_database_url.startswith("postgresql"):
        del entries["index_pending"]  # SQLite's FTS5 keeps no pending list
    return entries


@click.command()
@click.option("--concurrency", "-c", type=click.IntRange(1, 1024), help="Turns at once (threads).")
@click.option(
    "--pool",
    "-P",
    type=click.Choice(["threads", "prefork", "solo"]),
    default="threads",
    show_default=True,
    help="Threads suit turns that wait on a model.",
)
@click.option(
    "--queues",
    "-Q",
    default=",".join(ALL_QUEUES),
    show_default=True,
    help="Comma list of queues to consume.",
)
@click.option("--loglevel", "-l", default="INFO", show_default=True)
@click.option("--hostname", "-n", help="Node name (default hermes-<pid>@<host>).")
@click.option(
    "--skip-missing-sdks",
    is_flag=True,
    help="Leave out a configured platform whose SDK does not import (logged) instead of "
    "refusing to start; the worker a terminal chat starts uses it.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    help="Serve Prometheus /metrics on this port (default workers.metrics_port; off if unset).",
)
@click.pass_context
def worker(
    ctx: click.Context,
    concurrency: int | None,
    pool: str,
    queues: str,
    loglevel: str,
    hostname: str | None,
    skip_missing_sdks: bool,
    metrics_port: int | None,
) -> None:
    """Run a Celery worker that drains sessions, delivers replies and runs maintenance."""
    settings = _settings(ctx)
    if not skip_missing_sdks:
        refuse_missing_sdks(configured_platforms(settings))
    try:  # media.url without boto3: say so once, not in every turn with an attachment
        media_objects.from_settings(settings.media)
    except media_objects.MediaStorageError as exc:
        click.echo(f"hermes worker: {exc}", err=True)
        sys.exit(1)
    node = hostname or f"hermes-{os.getpid()}@%h"
    heartbeat = join_fleet(settings, "worker", name=node.replace("%h", socket.gethostname()))
    try:
        _run_worker(settings, node, concurrency, pool, queues, loglevel, metrics_port)
    finally:
        if heartbeat is not None:
            heartbeat.stop()


def _run_worker(
    settings: Settings,
    node: str,
    concurrency: int | None,
    pool: str,
    queues: str,
    loglevel: str,
    metrics_port: int | None,
) -> None:
    port = metrics_port or settings.workers.metrics_port
    metrics = _metrics(settings, port, pool, node) if port else None
    app = create_app(settings, metrics)
    _fail_orphaned_handoffs(settings)
    argv = [
        *(["--quiet"] if _quiet(loglevel) else []),
        "worker",
        "--pool",
        pool,
        "--concurrency",
        str(concurrency or settings.workers.concurrency),
        "--queues",
        queues,
        "--loglevel",
        loglevel,
        "--hostname",
        node,
        "--task-events",
        "--without-mingle",
    ]
    app.worker_main(argv)


def join_fleet(settings: Settings, role: str, *, name: str = "") -> Heartbeat | None:
    """Refuse to start (one line, exit 1) when this process's database and broker belong to
    different fleets; else show it in the fleet (`hermes status`) until the heartbeat stops.
    None when the broker is not Redis (nothing to check against)."""
    client = broker_redis(settings, timeout=FLEET_REDIS_TIMEOUT)
    if client is None:
        return None
    try:
        store = open_store(settings.resolved_database_url)
        try:
            return join(settings, store, client, role, name=name)
        finally:
            store.close()
    except FleetMismatch as exc:
        client.close()
        click.echo(f"hermes {role}: {exc}", err=True)
        sys.exit(1)
    except BaseException:
        client.close()
        raise


def _fail_orphaned_handoffs(settings: Settings) -> None:
    """Before taking tasks: handoffs a dead worker of this host left running are failed now,
    not redone (a second delivery) nor left for the sweep's STALE_SECONDS."""
    from workers.handoff import fail_orphans

    try:
        store = open_store(settings.resolved_database_url)
        try:
            fail_orphans(store, time.time)
        finally:
            store.close()
    except (StoreError, OperationalError) as exc:  # the redrive sweep still fails them later
        log.warning("could not look for handoffs a lost worker left running: %s", exc)


def _quiet(loglevel: str) -> bool:
    """No start-up banner when only warnings are wanted (`hermes up` runs its roles so)."""
    return logging.getLevelName(loglevel.upper()) in (
        logging.WARNING,
        logging.ERROR,
        logging.CRITICAL,
    )


def refuse_missing_sdks(platforms: list[str]) -> None:
    """Stop here, once, when a configured platform's SDK does not import: every task would
    otherwise fail on it."""
    problems = sdk_problems(platforms, [SENDER])
    for line in problems:
        click.echo(f"hermes worker: {line}", err=True)
    if problems:
        sys.exit(1)


def _metrics(settings: Settings, port: int, pool: str, hostname: str | None) -> WorkerMetrics:
    """This worker's metrics, served on `port` until it exits. A prefork pool's children count
    in files (prometheus_client's multiprocess mode, which it takes from the environment only:
    set here, before any metric exists, when the caller has not chosen a directory)."""
    multiprocess = pool == "prefork"
    if multiprocess and MULTIPROC_ENV not in os.environ:
        name = (hostname or f"hermes-{os.getpid()}").replace("%h", "host").replace("/", "_")
        os.environ[MULTIPROC_ENV] = str(multiprocess_dir(settings.run_dir, name))
    metrics = WorkerMetrics(None, private=not multiprocess)
    if multiprocess:
        from celery.signals import worker_process_shutdown

        worker_process_shutdown.connect(
            lambda pid=None, **_: process_exited(pid or os.getpid()), weak=False
        )
    store = open_store(settings.resolved_database_url)
    try:
        serve(
            metrics,
            host=settings.workers.metrics_host,
            port=port,
            store=store,
            clock=time.time,
            multiprocess=multiprocess,
        )
    except OSError as exc:
        store.close()
        raise click.ClickException(
            f"cannot serve metrics on port {port}: {exc.strerror or exc}"
        ) from None
    return metrics


@click.command()
@click.option("--loglevel", "-l", default="INFO", show_default=True)
@click.pass_context
def beat(ctx: click.Context, loglevel: str) -> None:
    """Run Celery beat: the redrive sweep and the other schedules. Run one or more: one
    schedules at a time (a lock in the broker's Redis), the others stand by."""
    settings = _settings(ctx)
    settings.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    client = broker_redis(settings)
    if client is None:
        raise click.UsageError(
            f"hermes beat needs a Redis broker for its fleet-wide lock; "
            f"{settings.resolved_broker_url.split('://')[0]}:// is not one"
        )
    heartbeat = join_fleet(settings, "beat")
    assert heartbeat is not None  # the broker is Redis
    fleet = heartbeat.process.fleet
    app = create_app(settings)
    app.conf.beat_schedule = beat_config(settings)
    try:
        app.Beat(
            loglevel=loglevel,
            quiet=_quiet(loglevel),
            scheduler=functools.partial(FleetScheduler, redis_client=client, fleet=fleet),
            schedule=str(settings.run_dir / "celerybeat-schedule"),
            pidfile=None,
        ).run()
    finally:
        heartbeat.stop()
        client.close()


LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def _credentials_ok(basic_auth: str) -> bool:
    """Flower's `user:password[,user:password…]` with no empty user or password (":" passed,
    and Flower then let an empty Authorization in)."""
    pairs = [pair.partition(":") for pair in basic_auth.split(",")]
    return all(user.strip() and sep and password.strip() for user, sep, password in pairs)


@click.command()
@click.option("--address", help="Listen address (default flower.address).")
@click.option("--port", type=click.IntRange(1, 65535), help="Port (default flower.port).")
@click.pass_context
def flower(ctx: click.Context, address: str | None, port: int | None) -> None:
    """Run Flower, the Celery dashboard, on the same broker (basic auth from flower.basic_auth)."""
    settings = _settings(ctx)
    where = address or settings.flower.address
    auth = settings.flower.basic_auth
    if auth is None and where not in LOOPBACK:
        raise click.UsageError(
            f"flower on {where} needs flower.basic_auth (HERMES_FLOWER__BASIC_AUTH=user:password)"
        )
    if auth is not None and not _credentials_ok(auth.get_secret_value()):
        raise click.UsageError(
            "flower.basic_auth must look like user:password (both non-empty; several "
            "separated by commas)"
        )
    app = create_app(settings)
    argv = ["flower", f"--address={where}", f"--port={port or settings.flower.port}"]
    if auth is not None:
        argv.append(f"--basic-auth={auth.get_secret_value()}")
    app.start(argv=argv)
