"""`hermes sessions`: list, export, import, delete, rename, prune, stats, browse."""

from __future__ import annotations

import click

from producers.cli.app import App, is_terminal, pass_app
from producers.cli.browse import browse_cmd
from producers.cli.guard import store_command
from producers.cli.prune import prune_cmd
from producers.cli.render import confirm, human_bytes, listing_table, print_table
from producers.cli.sessions_io import export_cmd, import_cmd
from producers.cli.space import file_sizes
from shared import legacy_media
from shared.db import SessionNotFound
from shared.store import lineage, media, session_listing
from shared.store import reclaim as reclaim_store
from shared.store import sessions as session_rows
from shared.titles import TitleSource
from shared.wording import plural


@click.group()
def sessions() -> None:
    """List, export, import, rename, delete and prune sessions."""


@sessions.command("list")
@click.option("--source", "-s", help="Only sessions from this source (cli, telegram, slack, ...).")
@click.option(
    "--limit",
    "-n",
    default=20,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="Show at most this many sessions (1-10,000).",
)
@pass_app
@store_command
def list_cmd(app: App, source: str | None, limit: int) -> None:
    """Sessions, most recently active first."""
    with app.store().read() as conn:
        rows, more = session_listing.list_sessions(conn, source=source, limit=limit)
        total = session_listing.count_sessions(conn, source=source) if more else len(rows)
    if not rows:
        click.echo(f"No sessions from {source} yet." if source else "No sessions yet.")
        return
    headers, cells = listing_table(rows, app.clock())
    print_table(headers, cells, terminal=is_terminal())
    if more:
        click.echo(
            f"Showing {len(rows)} of {total:,} sessions; use --limit to see more.",
        )


@sessions.command("delete")
@click.argument("session")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@pass_app
@click.pass_context
@store_command
def delete_cmd(ctx: click.Context, app: App, session: str, yes: bool) -> None:
    """Delete a session and its messages (by id, id prefix or title)."""
    store = app.store()
    with store.read() as conn:
        record = lineage.resolve(conn, session, newest=False)
    what = plural(record.message_count, "message")
    if record.title:
        what = f'"{record.title}", {what}'
    if not yes and not confirm(f"Delete session {record.id} ({what})?"):
        click.echo("Aborted; nothing deleted.", err=True)
        ctx.exit(1)
    dropped: list[str] = []
    with store.write() as conn:
        if not session_rows.delete_session(conn, record.id, dropped):
            raise SessionNotFound(record.id)
    media.forget(store, app.media_objects(), dropped)  # after the commit: an orphan at worst
    legacy_media.remove(app.settings.media_dir, [record.id])  # files an older version saved
    click.echo(f"Deleted session {record.id} ({plural(record.message_count, 'message')}).")


@sessions.command("rename")
@click.argument("session")
@click.argument("title", nargs=-1, required=True)
@pass_app
@store_command
def rename_cmd(app: App, session: str, title: tuple[str, ...]) -> None:
    """Give a session a title; several words need no quotes."""
    with app.store().write() as conn:
        record = lineage.resolve(conn, session, newest=False)
        session_rows.set_title(conn, record.id, " ".join(title), TitleSource.USER)
        renamed = session_rows.require_session(conn, record.id)
    click.echo(f'Renamed {renamed.id} to "{renamed.title}".')


@sessions.command("stats")
@pass_app
@store_command
def stats_cmd(app: App) -> None:
    """Session and message counts, sessions per source, and the size of state.db."""
    store = app.store()
    with store.read() as conn:
        totals = session_listing.stats(conn)
    click.echo(f"Total sessions: {totals.sessions}")  # the guide's lines, numbers as they are
    click.echo(f"Total messages: {totals.messages}")
    for source, count, _messages in totals.by_source:
        click.echo(f"  {source}: {plural(count, 'session', grouped=False)}")
    on_server = reclaim_store.server_size(store)
    if on_server is not None:
        schema, size = on_server
        click.echo(f"Database size: {human_bytes(size)} (schema {schema} on the PostgreSQL server)")
        return
    if store.path is None:
        click.echo(f"Database size: not measured here ({store.dialect} server)")
        return
    main, wal = file_sizes(store.path)
    click.echo(
        f"Database size: {human_bytes(main + wal)} "
        f"(state.db {human_bytes(main)} + WAL {human_bytes(wal)}, {store.path})"
    )


sessions.add_command(export_cmd)
sessions.add_command(import_cmd)
sessions.add_command(prune_cmd)
sessions.add_command(browse_cmd)
