"""`hermes status`: workers alive, turns waiting and their age, leases held, dead turns."""

from __future__ import annotations

import json
from typing import Any

import click

from producers.broker import broker_client
from producers.cli.app import App, pass_app
from producers.cli.up import _redact
from producers.stack.embedded_redis import is_alive
from shared.pipeline import inbox, outbox


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


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@pass_app
def status(app: App, as_json: bool) -> None:
    """Show workers alive, waiting turns, the oldest one's age, leases held and dead turns."""
    now = app.clock()
    with app.store().read() as conn:
        summary = inbox.summary(conn, now)
        pending = outbox.pending_count(conn)
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
