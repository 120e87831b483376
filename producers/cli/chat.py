"""`hermes` / `hermes chat`: talk to the agent from this terminal; `-q` for one message.

Terminal turns are `cli` platform turns through the same inbox and workers as every other
surface (see chat_client for the route scheme). With nothing else running, the chat brings
up the embedded stack for itself and stops it on exit (chat_stack).
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from producers.broker import BrokerWaker, broker_client, join_fleet
from producers.cli.app import App, fail, pass_app
from producers.cli.chat_client import NothingToResume, TerminalChat
from producers.cli.chat_options import continue_option, resume_option
from producers.cli.chat_stack import ChatStack, WorkerExited
from producers.cli.startup import on_chat_start
from producers.stack.embedded_redis import EmbeddedRedisError
from shared.fleet_registry import FleetMismatch, Heartbeat
from shared.media_objects import MediaStorageError
from shared.store.media import MediaRefused, check_size, max_bytes_for
from shared.turns import Attachment

TITLE_WAIT_SECONDS = 2.0
TITLE_POLL_SECONDS = 0.1
CHORES_WAIT_SECONDS = 5.0


def attachment_for(path: str, max_mb: float) -> Attachment:
    """A local file as an attachment: its kind from its type. The terminal uploads its bytes
    when the turn is sent (TerminalChat.upload); MediaRefused here when it is over the cap."""
    import mimetypes

    file = Path(path).expanduser().resolve()
    mime = mimetypes.guess_type(file.name)[0]
    major = (mime or "").split("/")[0]
    kind = major if major in ("image", "audio") else "document" if major == "text" else "file"
    size = file.stat().st_size
    check_size(size, max_bytes_for(max_mb), file.name)
    return Attachment(kind=kind, name=file.name, mime_type=mime, path=str(file), size=size)


@click.command()
@click.option("-q", "--query", metavar="TEXT", help="Send one message, print the reply, exit.")
@continue_option
@resume_option
@click.option(
    "-a",
    "--attach",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Attach a file to the -q message (repeatable).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=600,
    show_default=True,
    help="With -q: seconds to wait for the reply.",
)
@pass_app
def chat(
    app: App,
    query: str | None,
    continue_: str | None,
    resume: str | None,
    attach: tuple[str, ...],
    timeout: float,
) -> None:
    """Chat with the agent in this terminal (what `hermes` alone runs).

    Prints the session id on exit; `hermes -c` continues the latest terminal session,
    `hermes -r ID|PREFIX|TITLE` a given one, with a recap of where you left off.
    """
    run_chat(app, query=query, continue_=continue_, resume=resume, attach=attach, timeout=timeout)


def run_chat(
    app: App,
    *,
    query: str | None = None,
    continue_: str | None = None,
    resume: str | None = None,
    attach: tuple[str, ...] = (),
    timeout: float = 600,
) -> None:
    if continue_ is not None and resume is not None:
        raise click.UsageError("use -c/--continue or -r/--resume, not both")
    if attach and query is None:
        raise click.UsageError("--attach goes with -q; in a chat, type /attach PATH")
    settings = app.settings
    files = _checked_files(attach, settings.agent.max_attachment_mb)
    notes = Console(stderr=True, highlight=False)
    store = app.store()
    producer = broker_client(settings)
    app._closers.append(producer.close)
    terminal = TerminalChat(settings, store, BrokerWaker(producer), app.clock)
    resumed = None
    if resume is not None or continue_ is not None:
        try:
            found = terminal.find(resume=resume, continue_name=continue_ or None)
        except NothingToResume as exc:
            fail(str(exc), 1)
        resumed = terminal.attach(found)
    else:
        terminal.start_fresh()
    stack = ChatStack(settings, say=lambda line: _say(notes, line))
    chores = None
    repl = None
    if query is None:
        from producers.cli.chat_repl import Repl

        repl = Repl(terminal, settings, Console(highlight=False), notes)
        repl.header()
    hang_up = _leave_on_signals()
    heartbeat: Heartbeat | None = None
    try:
        try:
            stack.ensure()
        except EmbeddedRedisError as exc:
            fail(f"hermes: {exc}", 2)
        heartbeat = _join_fleet(app)
        chores = on_chat_start(settings, store, producer, say=lambda line: _say(notes, line))
        try:
            if repl is not None:
                repl.health = stack.check_worker
                code = repl.run(resumed)
            else:
                assert query is not None
                code = _one_shot(terminal, notes, query, files, timeout, stack.check_worker)
        except WorkerExited as exc:
            notes.print(f"hermes: {exc}", style="red", markup=False, soft_wrap=True)
            code = 1
    finally:
        hang_up()
        terminal.close()
        if chores is not None:
            chores.join(timeout=CHORES_WAIT_SECONDS)  # long done: only a dead broker holds it
        with _signals_ignored():  # a second Ctrl-C or hang-up must not strand the stack
            try:
                if repl is None or not repl.handed_off:  # a handed-off session lives on
                    _leave(terminal, notes)
                if stack.chat_owned:
                    with contextlib.suppress(Exception):  # a courtesy; never keeps the stack
                        _let_the_title_land(terminal)
            finally:
                _close_stack(stack, heartbeat)
    if code:
        raise SystemExit(code)


def _close_stack(stack: ChatStack, heartbeat: Heartbeat | None) -> None:
    """Leave the fleet's list while its broker is still there, then stop the stack: a
    chat-owned stack stops the broker, and a delete sent after that waited out redis-py's
    retries (about 4 s) before giving up."""
    if heartbeat is not None:
        heartbeat.stop()
    stack.close()


def _checked_files(paths: tuple[str, ...], max_mb: float) -> tuple[Attachment, ...]:
    """`-a` files as attachments, refused (one line, exit 2, nothing stored) over the cap."""
    try:
        return tuple(attachment_for(path, max_mb) for path in paths)
    except MediaRefused as exc:
        fail(f"hermes: {exc}", 2)


def _join_fleet(app: App) -> Heartbeat | None:
    """Refuse at once when the store and the broker belong to different fleets (a client on a
    fleet's broker but a local SQLite file would send turns no worker can see, then time out);
    else show this terminal in the fleet while it runs."""
    try:
        heartbeat = join_fleet(app.settings, app.store(), "chat")
    except FleetMismatch as exc:
        fail(f"hermes: {exc}", 1)
    return heartbeat


def _one_shot(
    terminal: TerminalChat,
    notes: Console,
    text: str,
    attachments: tuple[Attachment, ...],
    timeout: float,
    health: Callable[[], None] = lambda: None,
) -> int:
    """`-q`: the reply on stdout (nothing else), the session id on stderr."""
    if not text.strip() and not attachments:
        raise click.UsageError("-q needs some text")
    try:
        turn_id = terminal.send(text, attachments)
    except (MediaRefused, OSError) as exc:  # changed or gone since the start: nothing sent
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        notes.print(f"hermes: an attachment could not be read: {reason}", markup=False)
        return 2
    except MediaStorageError as exc:  # the bucket refused or is unreachable: nothing sent
        notes.print(f"hermes: an attachment could not be stored: {exc}", markup=False)
        return 2
    outcome = terminal.wait(turn_id, timeout=timeout, tick=lambda _waited, _status: health())
    session_id = terminal.session_id() or terminal.chat_id
    if outcome is None:
        notes.print(
            f"No reply within {timeout:.0f}s; the message stays queued in session {session_id}.",
            markup=False,
        )
        return 1
    for line in outcome.replies:
        click.echo(line)
    notes.print(f"session {session_id}", style="dim", markup=False)
    return 0 if outcome.status == "done" else 1


def _leave(terminal: TerminalChat, notes: Console) -> None:
    """Leaving ends the terminal's session (resuming reopens it); a failure is said, and
    never keeps the chat from stopping its stack."""
    try:
        terminal.leave()
    except Exception as exc:
        _say(notes, f"hermes: could not mark the session ended ({exc}); `hermes -c` still works.")


def _let_the_title_land(terminal: TerminalChat) -> None:
    """The worker titles a session after its first exchange, in a task sent once the reply is
    committed: before a chat-owned stack stops, give that task up to TITLE_WAIT_SECONDS."""
    deadline = time.monotonic() + TITLE_WAIT_SECONDS
    while time.monotonic() < deadline:
        session = terminal.session()
        if session is None or session.title is not None or session.message_count < 2:
            return
        if terminal.clock() - session.last_active_at > TITLE_WAIT_SECONDS:
            return  # not a first exchange that just finished
        time.sleep(TITLE_POLL_SECONDS)


def _say(console: Console, line: str) -> None:
    with contextlib.suppress(OSError):  # the terminal went away (hang-up): keep shutting down
        console.print(line, style="dim", markup=False, soft_wrap=True)


def _leave_on_signals() -> Callable[[], None]:
    """A closed terminal (SIGHUP) or a SIGTERM leaves the chat like Ctrl-D: the stack it
    started is stopped. Returns the function that restores the previous handlers."""

    def leave(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, leave) for sig in (signal.SIGHUP, signal.SIGTERM)}

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    signals = (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
