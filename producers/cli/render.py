"""How `hermes sessions` shows things: relative times, sizes, tables, prompts, progress bars."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime

import click
from rich.cells import cell_len, set_cell_size
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn
from rich.table import Table

from shared.store.session_listing import SessionListing

MINUTE = 60
HOUR = 60 * MINUTE
DAY = 24 * HOUR
NO_VALUE = "—"
PLAIN_TITLE_CELLS = 40
PLAIN_GAP = "  "


def relative_time(timestamp: float, now: float) -> str:
    """`just now`, `5m ago`, `3h ago`, `yesterday`, `3d ago`, then the local date."""
    elapsed = now - timestamp
    if elapsed < MINUTE:
        return "just now"
    if elapsed < HOUR:
        return f"{int(elapsed // MINUTE)}m ago"
    if elapsed < DAY:
        return f"{int(elapsed // HOUR)}h ago"
    if elapsed < 2 * DAY:
        return "yesterday"
    if elapsed < 7 * DAY:
        return f"{int(elapsed // DAY)}d ago"
    return local_date(timestamp)


def local_date(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d")


def human_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def crop(text: str, cells: int) -> str:
    """`text` cut to `cells` terminal cells (CJK counts double), with an ellipsis if cut."""
    if cell_len(text) <= cells:
        return text
    return set_cell_size(text, cells - 1).rstrip() + "…"


def listing_table(rows: Sequence[SessionListing], now: float) -> tuple[list[str], list[list[str]]]:
    """Headers and cells: with a Title column when any row has a title, else with Src."""
    titled = any(row.record.title for row in rows)
    if titled:
        headers = ["Title", "Preview", "Last Active", "ID"]
    else:
        headers = ["Preview", "Last Active", "Src", "ID"]
    cells: list[list[str]] = []
    for row in rows:
        when = relative_time(row.record.last_active_at, now)
        preview = row.preview or NO_VALUE
        if titled:
            cells.append([row.record.title or NO_VALUE, preview, when, row.record.id])
        else:
            cells.append([preview, when, row.record.source, row.record.id])
    return headers, cells


def plain_lines(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Aligned plain text for pipes: cell-width aware, the last column unpadded."""
    cropped = [
        [crop(cell, PLAIN_TITLE_CELLS) if i == 0 else cell for i, cell in enumerate(row)]
        for row in rows
    ]
    table = [list(headers), *cropped]
    widths = [max(cell_len(row[i]) for row in table) for i in range(len(headers))]
    lines = []
    for row in table:
        padded = [set_cell_size(cell, widths[i]) for i, cell in enumerate(row[:-1])]
        lines.append(PLAIN_GAP.join([*padded, row[-1]]).rstrip())
    return lines


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, terminal: bool) -> None:
    if not terminal:
        for line in plain_lines(headers, rows):
            click.echo(line)
        return
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    for header in headers:
        no_wrap = header in {"Last Active", "ID", "Src"}
        table.add_column(header, no_wrap=no_wrap, overflow="ellipsis", max_width=None)
    for row in rows:
        table.add_row(*row)
    Console().print(table)


def confirm(question: str) -> bool:
    """Ask on stderr; only `y` or `yes` agrees (anything else, or Enter, declines)."""
    answer = click.prompt(
        f"{question} [y/N]", default="", show_default=False, prompt_suffix=" ", err=True
    )
    return str(answer).strip().lower() in {"y", "yes"}


@contextmanager
def progress_bar(
    total: float | None, description: str, *, enabled: bool = True
) -> Iterator[Callable[[float], None]]:
    """A transient bar on stderr when it is a terminal; a silent no-op when piped."""
    if not enabled or not sys.stderr.isatty():
        yield lambda _amount: None
        return
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    with bar:
        task = bar.add_task(description, total=total)
        yield lambda amount: bar.advance(task, amount)
