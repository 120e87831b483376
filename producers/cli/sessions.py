"""`hermes sessions`: list, export, import, delete, rename, prune, stats, browse."""

from __future__ import annotations

import click

from producers.cli.app import App, pass_app
from shared.store import sessions as session_rows


@click.group()
def sessions() -> None:
    """List, export, import, rename, delete and prune sessions."""


@sessions.command("list")
@click.option("--source", "-s", help="Only sessions from this source (cli, telegram, slack, ...).")
@click.option("--limit", "-n", default=20, show_default=True, type=click.IntRange(1, 10_000))
@pass_app
def list_cmd(app: App, source: str | None, limit: int) -> None:
    """Sessions, most recently active first."""
    with app.store().read() as conn:
        rows, more = session_rows.list_sessions(conn, source=source, limit=limit)
    for row in rows:
        click.echo(f"{row.record.id}  {row.record.title or '—'}  {row.preview}")
    if more:
        click.echo(f"… more sessions exist; use --limit to see more than {limit}.")
