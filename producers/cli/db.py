"""`hermes db`: schema status, upgrade, check and backup of state.db."""

from __future__ import annotations

from pathlib import Path

import click

from producers.cli.app import App, fail, pass_app
from shared.db.engine import connect, guarded
from shared.db.errors import StoreError
from shared.db.migrate import HEAD, schema_status, upgrade_to_head
from shared.db.sqlite_care import (
    backup_store,
    backups_dir,
    check_store,
    default_target,
    quick_verdict,
)


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
        verdict = guarded(store, lambda: quick_verdict(store))
    finally:
        store.close()
    if verdict not in (None, "ok"):
        fail(f"{where}: schema {rev or 'empty'}, damaged ({verdict}); run `hermes db check`")
    if not needed:
        state = "up to date"
    elif rev is None:
        state = f"created at {HEAD} on first use or by `hermes db upgrade`"
    else:
        state = "needs `hermes db upgrade` (opening it upgrades it too)"
    click.echo(f"{where}: schema {rev or 'empty'} (newest {HEAD}), {state}")


@db.command()
@pass_app
def check(app: App) -> None:
    """Check state.db through: every page, the search indexes, the counters (exit 1 on damage)."""
    url = app.settings.resolved_database_url
    try:
        store = connect(url)
    except StoreError as error:
        if "is damaged" not in str(error):
            raise  # not ours, too new, unreadable: the usual one-line refusal
        fail(str(error))
    try:
        if store.path is None:
            click.echo(
                "PostgreSQL: page and index integrity is the server's (see amcheck); "
                "nothing checked here."
            )
            return
        found = guarded(store, lambda: check_store(store))
    finally:
        store.close()
    if not found:
        click.echo(f"{store.path}: ok")
        return
    for line in found:
        click.echo(line)
    fail(f"{store.path}: {len(found)} problem(s); backups are in {backups_dir(store.path)}")


@db.command()
@click.argument("dest", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--keep", type=click.IntRange(1), help="Keep only the newest N backups there.")
@pass_app
def backup(app: App, dest: Path | None, keep: int | None) -> None:
    """Copy state.db while it is in use (to $HERMES_HOME/backups/state-<UTC>.db by default)."""
    store = app.store()
    if store.path is None:
        fail("PostgreSQL: `hermes db backup` copies SQLite files only; use pg_dump", 2)
    target = dest or default_target(store.path, app.clock())
    made = guarded(store, lambda: backup_store(store, target, keep=keep))
    gone = f", removed {len(made.removed)} older" if made.removed else ""
    click.echo(f"Backed up to {made.path} ({made.bytes:,} bytes, {made.seconds:.2f} s{gone}).")
