"""`hermes sessions import-legacy [DIR]`: bring an older Hermes' transcript files into state.db."""

from __future__ import annotations

from pathlib import Path

import click

from producers.cli.app import App, fail, pass_app
from producers.cli.guard import store_command
from shared.legacy import FOLDER
from shared.legacy_import import (
    EMPTY,
    IMPORTED,
    REFUSED,
    REJECTED,
    FileOutcome,
    delete_verified,
    import_legacy,
)
from shared.wording import plural

BAD_LINES_SHOWN = 5


def legacy_dir(app: App) -> Path:
    """Where an older Hermes kept its transcripts: `$HERMES_HOME/sessions`."""
    return app.settings.home / FOLDER


def _describe(outcome: FileOutcome) -> str:
    transcript = outcome.transcript
    count = plural(transcript.messages, "message")
    if outcome.status == REFUSED:
        return f"refused: {outcome.problem}"
    if outcome.status == REJECTED:
        return f"not imported: {outcome.problem}"
    if outcome.status == EMPTY:
        return "no messages in it: nothing to import"
    what = "imported" if outcome.status == IMPORTED else "already in state.db"
    if outcome.stored == transcript.messages:
        return f"{what}, {count} (verified)"
    return (
        f"{what}, but state.db holds {plural(outcome.stored or 0, 'message')} for it and the "
        f"file {count}: kept"
    )


def _report_bad_lines(outcome: FileOutcome) -> None:
    bad = outcome.transcript.bad
    for number, reason in bad[:BAD_LINES_SHOWN]:
        click.echo(f"{outcome.path}:{number}: {reason}", err=True)
    if len(bad) > BAD_LINES_SHOWN:
        click.echo(f"{outcome.path}: … and {len(bad) - BAD_LINES_SHOWN} more bad lines", err=True)
    if bad:
        click.echo(
            f"{outcome.path.name}: {plural(len(bad), 'line')} could not be imported; the file "
            "is kept (its good lines are in state.db).",
            err=True,
        )


@click.command("import-legacy")
@click.argument(
    "directory",
    metavar="[DIR]",
    required=False,
    type=click.Path(file_okay=False, path_type=Path),
)
@click.option(
    "--delete-imported",
    is_flag=True,
    help="After verifying, delete each file whose every message is in state.db.",
)
@pass_app
@store_command
def import_legacy_cmd(app: App, directory: Path | None, delete_imported: bool) -> None:
    """Import an older Hermes' transcripts (DIR/*.jsonl, default $HERMES_HOME/sessions).

    Each file is one session (named by its id, one JSON message per line). Files whose
    session is not in state.db yet are imported; then every file is checked by message
    count, and those fully in state.db are listed as safe to delete. Nothing is deleted
    unless --delete-imported is given. Bad lines are reported with their file and line
    number (the file's good lines are still imported). Exit code 1 when anything was left out.
    """
    where = directory if directory is not None else legacy_dir(app)
    if not where.is_dir():
        if directory is not None:
            fail(f"hermes sessions import-legacy: {where} is not a directory", 1)
        click.echo(f"No legacy transcripts: {where} does not exist.")
        return
    report = import_legacy(app.store(), where)
    if not report.outcomes:
        click.echo(f"No legacy transcripts (*.jsonl) in {where}.")
        return
    click.echo(f"Legacy transcripts in {where}:")
    for outcome in report.outcomes:
        click.echo(f"  {outcome.path.name}: {_describe(outcome)}")
    for outcome in report.outcomes:
        _report_bad_lines(outcome)
    imported = report.imported
    messages = sum(outcome.transcript.messages for outcome in imported)
    click.echo(f"Imported {plural(len(imported), 'session')} ({plural(messages, 'message')}).")
    _finish(report.safe_to_delete, delete_imported)
    if report.troubled:
        click.get_current_context().exit(1)


def _finish(safe: list[Path], delete_imported: bool) -> None:
    if not safe:
        click.echo("No file is safe to delete yet.")
        return
    if not delete_imported:
        click.echo("Safe to delete (every message is in state.db):")
        for path in safe:
            click.echo(f"  {path}")
        click.echo("Delete them with `hermes sessions import-legacy --delete-imported`.")
        return
    failed = delete_verified(safe)
    click.echo(f"Deleted {plural(len(safe) - len(failed), 'file')} (verified in state.db).")
    for path, reason in failed:
        click.echo(f"could not delete {path}: {reason}", err=True)
    if failed:
        click.get_current_context().exit(1)
