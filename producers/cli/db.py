"""`hermes db`: schema status and upgrade of state.db."""

from __future__ import annotations

import click

from producers.cli.app import App, pass_app
from shared.db.engine import connect, guarded
from shared.db.migrate import HEAD, schema_status, upgrade_to_head


@click.group()
def db() -> None:
    """Inspect and upgrade the state.db schema."""


@db.command()
@pass_app
def upgrade(app: App) -> None:
    """Bring state.db to the newest schema (opening it does this too)."""
    store = connect(app.settings.resolved_database_url)
    try:
        before, after = guarded(store, lambda: upgrade_to_head(store))
    finally:
        store.close()
    if before == after:
        click.echo(f"state.db is already at schema {after}.")
    else:
        click.echo(f"Upgraded state.db from schema {before or 'empty'} to {after}.")


@db.command()
@pass_app
def status(app: App) -> None:
    """Show the schema revision of state.db and the newest this hermes knows."""
    store = connect(app.settings.resolved_database_url)
    where = str(store.path or "the database")
    try:

        def read() -> tuple[str | None, bool]:
            with store.read() as conn:
                # A foreign or too-new file is refused here too (exit 2), never "needs upgrade".
                return schema_status(conn, where)

        rev, needed = guarded(store, read)
    finally:
        store.close()
    if not needed:
        state = "up to date"
    elif rev is None:
        state = f"created at {HEAD} on first use or by `hermes db upgrade`"
    else:
        state = "needs `hermes db upgrade` (opening it upgrades it too)"
    click.echo(f"{where}: schema {rev or 'empty'} (newest {HEAD}), {state}")
