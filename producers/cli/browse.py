"""`hermes sessions browse`: an interactive picker; Enter resumes the chat (or prints how)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

import click
from rich.cells import cell_len

from producers.cli.app import App, fail, is_terminal, pass_app
from producers.cli.render import NO_VALUE, crop, relative_time
from shared.db.engine import guarded
from shared.store import session_listing

BROWSE_LIMIT = 2_000
WHEN_CELLS = 10
LABEL_CELLS = 60


@dataclass(frozen=True, slots=True)
class Entry:
    session_id: str
    label: str
    when: str
    haystack: str


def entries(rows: Sequence[session_listing.SessionListing], now: float) -> list[Entry]:
    found = []
    for row in rows:
        record = row.record
        label = record.title or row.preview or NO_VALUE
        if record.title and row.preview:
            label = f"{record.title} · {row.preview}"
        text = " ".join(part for part in (record.title, row.preview, record.id) if part)
        when = relative_time(record.last_active_at, now)
        found.append(Entry(record.id, label, when, text.lower()))
    return found


def matching(candidates: Sequence[Entry], query: str) -> list[Entry]:
    """Entries whose title, preview or id hold every word of `query` (case-blind), in order."""
    words = query.lower().split()
    return [entry for entry in candidates if all(word in entry.haystack for word in words)]


def line(entry: Entry) -> str:
    label = crop(entry.label, LABEL_CELLS)
    pad = " " * (LABEL_CELLS - cell_len(label))
    return f"{label}{pad}  {entry.when:>{WHEN_CELLS}}  {entry.session_id}"


@dataclass
class Selection:
    """The picker's state: what the filter lets through and which row is highlighted."""

    candidates: Sequence[Entry]
    shown: list[Entry] = field(default_factory=list)
    index: int = 0

    def __post_init__(self) -> None:
        self.shown = list(self.candidates)

    def refilter(self, query: str) -> None:
        self.shown = matching(self.candidates, query)
        self.index = 0

    def move(self, step: int) -> None:
        if self.shown:
            self.index = max(0, min(len(self.shown) - 1, self.index + step))

    @property
    def current(self) -> Entry | None:
        return self.shown[self.index] if self.shown else None


def pick(candidates: Sequence[Entry]) -> str | None:
    """Run the picker on the terminal; the chosen session id, or None when cancelled."""
    # Imported here: only this command needs prompt_toolkit, and `hermes` starts faster.
    from prompt_toolkit.application import Application
    from prompt_toolkit.buffer import Buffer
    from prompt_toolkit.data_structures import Point
    from prompt_toolkit.formatted_text import StyleAndTextTuples
    from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
    from prompt_toolkit.layout import BufferControl, FormattedTextControl, HSplit, Layout, Window
    from prompt_toolkit.output import create_output

    selection = Selection(candidates)
    query = Buffer(multiline=False, on_text_changed=lambda buffer: selection.refilter(buffer.text))

    def rows() -> StyleAndTextTuples:
        fragments: StyleAndTextTuples = [
            ("reverse" if i == selection.index else "", line(entry) + "\n")
            for i, entry in enumerate(selection.shown)
        ]
        return fragments or [("italic", "no session matches\n")]

    def status() -> StyleAndTextTuples:
        count = f" {len(selection.shown)}/{len(candidates)} "
        return [("bold", count), ("", "↑↓ move · Enter resume · Esc quit")]

    keys = KeyBindings()
    for names, step in (
        (("up", "c-p"), -1),
        (("down", "c-n"), 1),
        (("pageup",), -10),
        (("pagedown",), 10),
    ):
        for name in names:
            keys.add(name)(lambda _event, step=step: selection.move(step))

    @keys.add("enter")
    def _choose(event: KeyPressEvent) -> None:
        if selection.current is not None:
            event.app.exit(result=selection.current.session_id)

    @keys.add("escape", eager=True)
    @keys.add("c-c")
    @keys.add("c-d")
    def _cancel(event: KeyPressEvent) -> None:
        event.app.exit(result=None)

    listing = FormattedTextControl(rows, get_cursor_position=lambda: Point(0, selection.index))
    layout = Layout(
        HSplit(
            [
                Window(BufferControl(query), height=1, get_line_prefix=lambda *_: "> "),
                Window(FormattedTextControl(status), height=1),
                Window(listing),
            ]
        ),
        focused_element=query,
    )
    # The picker draws on the terminal even when stdout is captured: `$(hermes sessions browse)`.
    output = create_output(stdout=sys.stdout if sys.stdout.isatty() else sys.stderr)
    picker: Application[str | None] = Application(
        layout=layout, key_bindings=keys, full_screen=True, output=output
    )
    return picker.run()


def _recent(app: App) -> list[session_listing.SessionListing]:
    store = app.store()

    def read() -> list[session_listing.SessionListing]:
        with store.read() as conn:
            return session_listing.list_sessions(conn, limit=BROWSE_LIMIT)[0]

    return guarded(store, read)


@click.command("browse")
@pass_app
def browse_cmd(app: App) -> None:
    """Pick a session interactively (type to filter, arrows, Enter) and resume its chat.

    When stdout is not a terminal (`$(hermes sessions browse)`), Enter prints the command
    that resumes it instead: `hermes --resume ID`.
    """
    if not sys.stdin.isatty():
        fail("hermes sessions browse needs an interactive terminal; use `hermes sessions list`.", 2)
    rows = _recent(app)
    if not rows:
        click.echo("No sessions yet.")
        return
    chosen = pick(entries(rows, app.clock()))
    if chosen is None:
        click.get_current_context().exit(1)
    if not is_terminal():
        click.echo(f"hermes --resume {chosen}")
        return
    from producers.cli.chat import run_chat  # the chat's stack is heavy: only when it runs

    run_chat(app, resume=chosen)
