"""`hermes db`: schema status, upgrade, check, backup and copy of the store."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from producers.cli.app import App, fail, pass_app
from shared.db import server
from shared.db.copy import Copied, copy_store, parse_target, shown
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
    """Name the database (dialect, server, where) and its schema revision against the newest."""
    store = connect(app.settings.resolved_database_url)
    where = server.where(store)
    try:

        def read() -> tuple[str | None, bool]:
            with store.read() as conn:
                # A foreign or too-new file is refused here too (exit 2), never "needs upgrade".
                return schema_status(conn, where)

        rev, needed = guarded(store, read)
        verdict = guarded(store, lambda: quick_verdict(store))
        described = guarded(store, lambda: server.describe(store))
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
    click.echo(f"Database: {described}")
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


@db.command("copy")
@click.option(
    "--to",
    "target",
    required=True,
    metavar="URL",
    help="An empty database: postgresql://USER@HOST/DB, or sqlite:///PATH (a new file).",
)
@click.option(
    "--batch",
    default=2000,
    show_default=True,
    type=click.IntRange(1, 100_000),
    help="Rows read and written per batch (memory stays at one batch).",
)
@pass_app
def copy(app: App, target: str, batch: int) -> None:
    """Copy this store, every table, into an empty database (SQLite <-> PostgreSQL).

    The target is brought to the newest schema first; the rows go in one transaction, so a
    copy that fails or is stopped leaves the target empty (run it again). Row counts and
    message counters are compared with the source's before the copy commits.
    """
    parse_target(target)  # a bad URL is refused before the source is even opened
    source = app.store()
    first_row = [0.0]  # when the rows began to move (the schema is made before)
    with _table_bars() as (on_table, on_rows):

        def begin(name: str, total: int) -> None:
            first_row[0] = first_row[0] or time.perf_counter()
            on_table(name, total)

        copied = copy_store(
            source,
            app.settings.resolved_database_url,
            target,
            batch=batch,
            on_table=begin,
            on_rows=on_rows,
        )
    moving = time.perf_counter() - first_row[0] if first_row[0] else copied.seconds
    _report(str(source.path or shown(app.settings.resolved_database_url)), copied, moving)


def _report(source: str, copied: Copied, moving: float) -> None:
    rate = copied.total / moving if moving > 0 else 0.0
    click.echo(
        f"Copied {source} to {copied.target}: {copied.total:,} rows in {copied.seconds:.2f} s "
        f"({moving:.2f} s of rows, {rate:,.0f} rows/s; the rest made the schema)"
    )
    width = max(len(name) for name in copied.rows)
    for name, rows in copied.rows.items():
        click.echo(f"  {name:<{width}}  {rows:>12,}")
    click.echo("Row counts and message counters verified equal on both sides.")


@contextmanager
def _table_bars() -> Iterator[tuple[Callable[[str, int], None], Callable[[str, int], None]]]:
    """One bar per table on stderr when it is a terminal (rows done of rows, rate); else quiet."""
    if not sys.stderr.isatty():
        yield (lambda _name, _total: None), (lambda _name, _rows: None)
        return
    bars = Progress(
        TextColumn("{task.description:<16}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("rows"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    )
    tasks: dict[str, TaskID] = {}

    def start(name: str, total: int) -> None:
        tasks[name] = bars.add_task(name, total=total)

    def advance(name: str, rows: int) -> None:
        bars.advance(tasks[name], rows)

    with bars:
        yield start, advance
