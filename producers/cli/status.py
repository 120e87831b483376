"""`hermes status`: workers alive, turns waiting and their age, leases held, dead turns, and
the fleet: its id in the database and in the broker, its hosts and the processes alive on them
(shared.fleet_registry)."""

from __future__ import annotations

import json
from typing import Any

import click

from producers.broker import broker_client, broker_redis
from producers.cli.app import App, pass_app
from producers.cli.up import _redact
from producers.stack.embedded_redis import is_alive
from shared.fleet_registry import FLEET_ID_KEY, Process, processes
from shared.pipeline import inbox, outbox
from shared.store.fleet import stored_fleet_id

FLEET_REDIS_TIMEOUT = 1.0


def _age(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _workers(app: App) -> list[str] | None:
    settings = app.settings
    if settings.uses_embedded_broker and not is_alive(settings.embedded_broker_socket):
        return None
    client = broker_client(settings)
    try:
        replies = client.control.ping(timeout=1.0) or []
    except Exception:
        return None
    finally:
        client.close()
    return sorted(name for reply in replies for name in reply)


def _broker_fleet(app: App) -> tuple[str | None, list[Process]] | None:
    """The broker's fleet id and live processes, or None when it cannot be reached."""
    settings = app.settings
    if settings.uses_embedded_broker and not is_alive(settings.embedded_broker_socket):
        return None
    client = broker_redis(settings, timeout=FLEET_REDIS_TIMEOUT)
    if client is None:
        return None
    try:
        raw = client.get(FLEET_ID_KEY)
        found = processes(client)
    except Exception:
        return None
    finally:
        client.close()
    return (raw.decode() if isinstance(raw, bytes) else raw), found


def _fleet_report(app: App, now: float, database_fleet: str | None) -> dict[str, Any]:
    seen = _broker_fleet(app)
    broker_id, found = seen if seen is not None else (None, [])
    rows = [
        {
            "host": p.host,
            "role": p.role,
            "pid": p.pid,
            "name": p.name,
            "version": p.version,
            "fleet": p.fleet,
            "age_seconds": round(max(0.0, now - p.started_at), 1),
            "last_seen_seconds": round(max(0.0, now - p.last_seen), 1),
        }
        for p in found
    ]
    return {
        "id": database_fleet,
        "broker_id": broker_id,
        "matches": database_fleet is not None and broker_id == database_fleet,
        "hosts": sorted({p.host for p in found}),
        "processes": rows,
    }


def _print_fleet(fleet: dict[str, Any]) -> None:
    ours, theirs = fleet["id"], fleet["broker_id"]
    if theirs is None:
        where = "the broker holds none yet" if ours is not None else "none yet"
    elif theirs == ours:
        where = "the broker's too"
    else:
        where = f"but the broker's is {theirs} — another fleet's: its processes refuse to start"
    click.echo(f"Fleet:         {ours or '—'} ({where})")
    hosts = fleet["hosts"]
    click.echo(f"Hosts:         {len(hosts)}" + (f" ({', '.join(hosts)})" if hosts else ""))
    click.echo(f"Processes:     {len(fleet['processes'])}")
    for row in fleet["processes"]:
        name = f" {row['name']}" if row["name"] else ""
        click.echo(
            f"  {row['host']}  {row['role']:<18} pid {row['pid']:<7} v{row['version']}"
            f"  up {_age(row['age_seconds'])}  seen {_age(row['last_seen_seconds'])} ago{name}"
        )


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@pass_app
def status(app: App, as_json: bool) -> None:
    """Show workers alive, waiting turns, the oldest one's age, leases held and dead turns;
    then the fleet: its id, its hosts and each process alive (role, pid, version, age, last
    heartbeat)."""
    now = app.clock()
    store = app.store()
    with store.read() as conn:
        summary = inbox.summary(conn, now)
        pending = outbox.pending_count(conn)
    fleet = _fleet_report(app, now, stored_fleet_id(store))
    workers = _workers(app)
    oldest = now - summary.oldest_waiting_at if summary.oldest_waiting_at else None
    report: dict[str, Any] = {
        "broker": _redact(app.settings.resolved_broker_url),
        "broker_reachable": workers is not None,
        "workers": workers or [],
        "waiting_turns": summary.waiting,
        "running_turns": summary.running,
        "oldest_waiting_seconds": round(oldest, 1) if oldest is not None else None,
        "leases_held": summary.leases_held,
        "dead_turns": summary.dead,
        "failed_turns": summary.failed,
        "outbox_pending": pending,
        "fleet": fleet,
    }
    if as_json:
        click.echo(json.dumps(report))
        return
    if workers is None:
        click.echo(f"Broker:        {report['broker']} — not reachable (is `hermes up` running?)")
    else:
        click.echo(f"Broker:        {report['broker']}")
        click.echo(
            f"Workers alive: {len(workers)}" + (f" ({', '.join(workers)})" if workers else "")
        )
    age = f" (oldest {_age(oldest)} ago)" if oldest is not None else ""
    click.echo(f"Waiting turns: {summary.waiting}{age}")
    click.echo(f"Running turns: {summary.running}")
    click.echo(f"Leases held:   {summary.leases_held}")
    click.echo(f"Dead turns:    {summary.dead}")
    click.echo(f"Replies queued: {pending}")
    _print_fleet(fleet)
