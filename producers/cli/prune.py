"""`hermes sessions prune`: delete ended sessions older than a cutoff, merge the search index,
then reclaim the space."""

from __future__ import annotations

import time

import click

from producers.cli.app import App, pass_app
from producers.cli.guard import store_command
from producers.cli.render import confirm, human_bytes, local_date, progress_bar
from producers.cli.space import ReclaimError, reclaim
from shared import legacy_media
from shared.db import OperationalError, Store
from shared.store import reclaim as reclaim_store
from shared.store import sessions as session_rows
from shared.wording import plural

DAY = 86_400.0
PRUNE_BATCH = 500
# Messages (with their FTS rows) deleted per write transaction, so turn writes never wait
# long: the bound beat's retention sweep uses (workers/sweeps/prune.py).
PRUNE_BATCH_MESSAGES = reclaim_store.BATCH_MESSAGES
TITLES_SHOWN = 3


def describe(summary: session_rows.PruneSummary) -> str:
    """`12 ended sessions (340 messages), ended 2024-01-02 … 2024-03-01, e.g. "a", "b"`."""
    text = f"{plural(summary.sessions, 'ended session')} ({plural(summary.messages, 'message')})"
    if summary.oldest_ended is not None and summary.newest_ended is not None:
        oldest, newest = local_date(summary.oldest_ended), local_date(summary.newest_ended)
        text += f", ended {oldest}" if oldest == newest else f", ended {oldest} … {newest}"
    if summary.sample_titles:
        text += ", e.g. " + ", ".join(f'"{title}"' for title in summary.sample_titles)
    return text


@click.command("prune")
@click.option(
    "--older-than",
    "days",
    default=90,
    show_default=True,
    type=click.IntRange(min=0),
    metavar="DAYS",
    help="Only sessions that ended more than DAYS days ago.",
)
@click.option("--source", "-s", help="Only sessions from this source.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--dry-run", is_flag=True, help="Show what would be deleted; delete nothing.")
@pass_app
@store_command
def prune_cmd(app: App, days: int, source: str | None, yes: bool, dry_run: bool) -> None:
    """Delete ended sessions older than DAYS days (live sessions are never pruned)."""
    store = app.store()
    cutoff = app.clock() - days * DAY
    with store.read() as conn:
        summary = session_rows.prune_summary(
            conn, ended_before=cutoff, source=source, sample=TITLES_SHOWN
        )
    scope = f" from {source}" if source else ""
    if summary.sessions == 0:
        older = plural(days, "day", grouped=False)
        click.echo(f"Nothing to prune: no sessions{scope} ended more than {older} ago.")
        return
    click.echo(f"Will delete {describe(summary)}{scope}.")
    if dry_run:
        click.echo("Dry run: nothing deleted.")
        return
    if not yes and not confirm("Delete them?"):
        click.echo("Aborted; nothing deleted.", err=True)
        click.get_current_context().exit(1)
    paced = reclaim_store.pacing_for(app.settings.maintenance, batch_sessions=PRUNE_BATCH)
    gone: list[str] = []
    with reclaim_store.merging_held(store):
        with progress_bar(summary.sessions, "Pruning") as advance:
            deleted, messages = reclaim_store.prune_in_batches(
                store,
                ended_before=cutoff,
                source=source,
                pacing=paced,
                sleep=time.sleep,
                progress=lambda count, _messages: advance(count),
                fold=True,
                deleted=gone,
                objects=app.media_objects(),
            )
        click.echo(f"Deleted {plural(deleted, 'session')} ({plural(messages, 'message')}).")
        legacy_media.remove(app.settings.media_dir, gone)  # files an older version saved here
        if deleted or messages:
            _merge(store, paced, full=True)
    if app.settings.sessions.vacuum_after_prune and deleted:
        _reclaim(store, paced)
    if deleted or messages:  # fold what appends left meanwhile
        _merge(store, paced, full=False)


def _reclaim(store: Store, pacing: reclaim_store.Pacing) -> None:
    try:
        sizes = reclaim(store, pacing, warn=_warn, sleep=time.sleep)
    except ReclaimError as error:
        click.echo(f"Could not reclaim space now ({error}); the freed pages will be reused.")
        return
    if sizes is not None:
        before, after = sizes
        click.echo(
            f"Reclaimed space: state.db was {human_bytes(before)} ({before:,} bytes), "
            f"now {human_bytes(after)} ({after:,} bytes)."
        )


def _merge(store: Store, pacing: reclaim_store.Pacing, *, full: bool) -> None:
    """Merge the search indexes, which keep deleted rows until a full merge (SQLite only);
    the full one runs with the appends' merging already held."""
    try:
        merged = reclaim_store.merge_indexes(
            store, pacing=pacing, sleep=time.sleep, full=full, hold=not full
        )
    except OperationalError as error:
        click.echo(f"Could not merge the search index now ({error.orig}); searches stay slower.")
        return
    if full and merged.steps:
        click.echo(
            f"Merged the search index: {plural(merged.segments_before, 'segment')} -> "
            f"{merged.segments_after}."
        )


def _warn(text: str) -> None:
    click.echo(f"Warning: {text}", err=True)
