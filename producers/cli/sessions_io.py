"""`hermes sessions export` and `import`: sessions with their messages as JSON lines."""

from __future__ import annotations

import io
import os
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, TextIO

import click

from producers.cli.app import App, pass_app
from producers.cli.guard import store_command
from producers.cli.render import progress_bar
from shared.store import lineage
from shared.store.portability import count_exportable, encode_line, export_sessions, import_lines
from shared.wording import plural

BAD_LINES_SHOWN = 20


def _binary(stream: TextIO) -> BinaryIO:
    """The byte stream under a text stream (click 8.5 deprecates get_binary_stream)."""
    return stream.buffer


@contextmanager
def _stdout() -> Iterator[BinaryIO]:
    stream = _binary(sys.stdout)
    try:
        yield stream
        stream.flush()
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, without a second error at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(1) from None


@contextmanager
def open_output(target: str) -> Iterator[BinaryIO]:
    """stdout for `-`; else a private (0600) file that appears complete or not at all."""
    if target == "-":
        with _stdout() as stream:
            yield stream
        return
    path = Path(target)
    partial = path.with_name(f".{path.name}.partial-{os.getpid()}")
    done = False
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            yield handle
        os.replace(partial, path)
        done = True
    except OSError as error:
        raise click.FileError(target, hint=error.strerror or str(error)) from None
    finally:
        if not done:
            partial.unlink(missing_ok=True)


@click.command("export")
@click.argument("file", metavar="FILE|-")
@click.option("--source", "-s", help="Only sessions from this source.")
@click.option(
    "--session-id", "session_ref", metavar="ID", help="Only this session (id, id prefix or title)."
)
@pass_app
@store_command
def export_cmd(app: App, file: str, source: str | None, session_ref: str | None) -> None:
    """Write sessions with their messages as JSON lines to FILE (- for stdout)."""
    exported = messages = 0
    with app.store().read() as conn:
        session_id = lineage.resolve(conn, session_ref).id if session_ref else None
        total = count_exportable(conn, source=source, session_id=session_id)
        # JSON on the terminal itself would tear the bar: no bar then.
        bar = not (file == "-" and sys.stdout.isatty())
        with open_output(file) as out, progress_bar(total, "Exporting", enabled=bar) as advance:
            docs = export_sessions(
                conn, source=source, session_id=session_id, objects=app.media_objects()
            )
            for doc in docs:
                out.write(encode_line(doc).encode("utf-8") + b"\n")
                exported += 1
                messages += len(doc["messages"])
                advance(1)
    where = "stdout" if file == "-" else file
    click.echo(
        f"Exported {plural(exported, 'session')} ({plural(messages, 'message')}) to {where}.",
        err=file == "-",
    )


def _size(handle: BinaryIO) -> int | None:
    try:
        info = os.fstat(handle.fileno())
    except (OSError, AttributeError, io.UnsupportedOperation):
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


@contextmanager
def open_input(source: str) -> Iterator[BinaryIO]:
    """stdin for `-`, else the file; a file that cannot be read is one line (exit 1)."""
    if source == "-":
        yield _binary(sys.stdin)
        return
    try:
        with Path(source).open("rb") as handle:
            yield handle
    except OSError as error:
        raise click.FileError(source, hint=error.strerror or str(error)) from None


@click.command("import")
@click.argument("file", metavar="FILE|-")
@pass_app
@store_command
def import_cmd(app: App, file: str) -> None:
    """Read sessions from a JSONL export (- for stdin); sessions already present are skipped.

    Each line is checked and written on its own: a bad line is reported with its number
    and leaves nothing behind; so is a session already present with other content (the
    stored one is kept). Exit code 1 when any line was bad or differed.
    """
    with open_input(file) as handle, progress_bar(_size(handle), "Importing") as advance:
        report = import_lines(
            app.store(), enumerate(handle, 1), progress=advance, objects=app.media_objects()
        )
    for number, reason in report.bad[:BAD_LINES_SHOWN]:
        click.echo(f"line {number}: {reason}", err=True)
    if len(report.bad) > BAD_LINES_SHOWN:
        click.echo(f"… and {len(report.bad) - BAD_LINES_SHOWN} more bad lines.", err=True)
    for number, session_id in report.differing[:BAD_LINES_SHOWN]:
        click.echo(
            f"line {number}: session {session_id} is already in the store with other content; "
            "kept the stored one",
            err=True,
        )
    if report.parents_dropped:
        click.echo(
            f"{plural(report.parents_dropped, 'parent link')} dropped: "
            "the parent session is neither in the file nor in the store.",
            err=True,
        )
    click.echo(
        f"Imported {plural(report.imported, 'session')} ({plural(report.messages, 'message')}), "
        f"skipped {report.skipped:,} already present"
        + (f" ({len(report.differing):,} with other content)" if report.differing else "")
        + f", {plural(len(report.bad), 'bad line')}."
    )
    if report.bad or report.differing:
        click.get_current_context().exit(1)
