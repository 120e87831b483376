"""The interactive chat: read a line (history, line editing), send it, show the reply.

Local to the terminal: /exit, /quit, Ctrl-D (leave), /attach PATH (a file for the next
message). Every other /command goes to the worker like any platform's. Ctrl-C during a reply
sends /stop; a second Ctrl-C stops waiting.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from producers.cli.chat_client import Outcome, TerminalChat
from producers.cli.chat_handoff import await_handoff, last_id
from producers.cli.chat_live import LiveReply
from producers.cli.recap_view import ASSISTANT_STYLE, USER_STYLE, render_recap
from shared import __version__
from shared.media_objects import MediaStorageError
from shared.model import SessionRecord
from shared.pipeline import inbox
from shared.settings import Settings
from shared.store.media import MediaRefused
from shared.turns import Attachment

SLOW_WORKER_SECONDS = 15.0
LEAVE = {"/exit", "/quit", "/q"}
TERMINAL_HELP = """In this terminal:
/attach PATH — attach a file to your next message
/exit — leave (or Ctrl-D); `hermes -c` picks up where you left off"""


class LineReader:
    """prompt_toolkit on a terminal (history in $HERMES_HOME/cli_history); plain lines otherwise."""

    def __init__(self, home: Path) -> None:
        self._session: Any = None
        self._prompt: Any = None
        if sys.stdin.isatty() and sys.stdout.isatty():
            from prompt_toolkit import PromptSession
            from prompt_toolkit.formatted_text import HTML
            from prompt_toolkit.history import FileHistory

            path = home / "cli_history"
            path.touch(mode=0o600, exist_ok=True)
            self._session = PromptSession(history=FileHistory(str(path)))
            self._prompt = HTML("<ansiyellow><b>●</b></ansiyellow> ")

    def read(self) -> str:
        if self._session is not None:
            return str(self._session.prompt(self._prompt))
        line = sys.stdin.readline()
        if not line:
            raise EOFError
        return line.rstrip("\n")


class Repl:
    def __init__(
        self, terminal: TerminalChat, settings: Settings, console: Console, notes: Console
    ) -> None:
        self.terminal = terminal
        self.settings = settings
        self.console = console
        self.notes = notes
        self.pending: list[Attachment] = []
        # Raises when the worker this chat started is gone (set by the chat command).
        self.health: Callable[[], None] = lambda: None
        self.handed_off = False  # the session went to a platform: leave, without ending it

    def header(self) -> None:
        """The first line: which hermes, which model (printed before the stack comes up)."""
        endpoint = self.settings.model_endpoint
        if endpoint is None:
            model = "offline model — set model.base_url in config.yaml to use yours"
        else:
            model = f"{endpoint.name} at {endpoint.base_url}"
        self.console.print(Text(f"hermes {__version__} · {model}", style="bold"))

    def run(self, resumed: SessionRecord | None) -> int:
        self._banner(resumed)
        reader = LineReader(self.settings.home)
        while True:
            try:
                line = reader.read().strip()
            except EOFError:
                break
            except KeyboardInterrupt:
                continue
            if not line:
                continue
            if line.split()[0] in LEAVE:
                break
            if line.startswith("/attach"):
                self._attach(line.removeprefix("/attach").strip())
                continue
            self._turn(line)
            if self.handed_off:
                return 0
        self._goodbye()
        return 0

    # --- around the conversation ---

    def _banner(self, resumed: SessionRecord | None) -> None:
        if resumed is not None:
            transcript = self.terminal.transcript(resumed.id)
            render_recap(self.console, resumed, transcript, self.settings.display.resume_display)
        else:
            self.console.print(Text("New session.", style="dim"), end=" ")
        self.console.print(
            Text("Type a message; /help lists commands; /exit or Ctrl-D leaves.", style="dim")
        )

    def _goodbye(self) -> None:
        with contextlib.suppress(OSError):  # the terminal is gone
            self._farewell()

    def _farewell(self) -> None:
        session = self.terminal.session()
        if session is None:
            self.console.print(Text("Nothing was sent, so no session was saved.", style="dim"))
            return
        if session.message_count == 0 and session.title is None:
            self.console.print(Text("No messages were sent, so nothing was saved.", style="dim"))
            return
        name = f' "{session.title}"' if session.title else ""
        self.console.print(Text(f"Session {session.id}{name} saved.", style="bold"))
        how = f"Resume it with: hermes -r {session.id}"
        if session.title:
            how += f'   or: hermes -c "{session.title}"'
        self.console.print(Text(how, style="dim"))

    def _attach(self, path: str) -> None:
        from producers.cli.chat import attachment_for

        if not path or not Path(path).expanduser().is_file():
            self.console.print(Text(f"No such file: {path or '(none given)'}", style="red"))
            return
        try:
            attachment = attachment_for(path, self.settings.agent.max_attachment_mb)
        except MediaRefused as exc:
            self.console.print(Text(f"Not attached: {exc}", style="red"))
            return
        self.pending.append(attachment)
        self.console.print(
            Text(f"Attached {attachment.name} ({attachment.kind}); it goes with your next message.",
                 style="dim")
        )  # fmt: skip

    # --- one turn ---

    def _turn(self, text: str) -> None:
        before = self.terminal.session_id()
        command = text.split()[0] if text.startswith("/") else ""
        handoffs_before = last_id(self.terminal.store, before) if command == "/handoff" else 0
        pending = tuple(self.pending)
        self.pending.clear()
        try:
            turn_id = self.terminal.send(text, pending)
        except (MediaRefused, OSError) as exc:  # changed or gone since /attach: nothing sent
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            self.console.print(Text(f"Not sent: an attachment could not be read: {reason}",
                                    style="red"))  # fmt: skip
            return
        except MediaStorageError as exc:  # the bucket refused or is unreachable: nothing sent
            self.console.print(Text(f"Not sent: an attachment could not be stored: {exc}",
                                    style="red"))  # fmt: skip
            return
        self._stop_replies: list[str] = []
        outcome = self._wait(turn_id)
        if outcome is not None:
            self._show(outcome, command=bool(command))
            if command == "/help" and outcome.status == inbox.DONE:
                self.console.print(Text(TERMINAL_HELP, style="cyan"))
        for reply in self._stop_replies:
            self.console.print(Text(reply, style="cyan"))
        if command == "/handoff" and outcome is not None and outcome.status == inbox.DONE:
            self._handoff(before, handoffs_before)
            if self.handed_off:
                return
        if command != "/compress":  # its reply already says where the conversation went
            self._follow(before, resumed=command == "/resume")

    def _handoff(self, session_id: str | None, after_id: int) -> None:
        if session_id is None:
            return
        with self.console.status("handing off…", spinner="dots") as status:

            def tick(state: str) -> None:
                self.health()
                word = "waiting for a gateway" if state == "pending" else "handing off"
                status.update(f"{word}…")

            ended = await_handoff(
                self.terminal.store, session_id, self.terminal.clock, tick, after_id=after_id
            )
        if ended is None:
            return
        for line in ended.lines:
            self.console.print(Text(line, style="bold" if ended.completed else "yellow"))
        self.handed_off = ended.completed

    def _wait(self, turn_id: int) -> Outcome | None:
        stopped: Outcome | None = None
        with LiveReply(self.console) as status:

            def tick(waited: float, state: str) -> None:
                self.health()
                if state == inbox.WAITING and waited > SLOW_WORKER_SECONDS:
                    status.update("waiting for a worker… (`hermes status` shows what is running)")
                else:
                    status.update(f"thinking… {waited:.0f}s" if waited >= 2 else "thinking…")

            try:
                return self.terminal.wait(turn_id, tick=tick, on_live=status.take)
            except KeyboardInterrupt:
                status.update("stopping… (Ctrl-C again to stop waiting)")
                try:
                    stop_id = self.terminal.send("/stop")
                    outcome = self.terminal.wait(turn_id)
                    stopped = self.terminal.wait(stop_id)
                except KeyboardInterrupt:
                    return None
        self._stop_replies = stopped.replies if stopped is not None else []
        return outcome

    def _show(self, outcome: Outcome, *, command: bool) -> None:
        if outcome.status == inbox.CANCELLED:
            self.console.print(Text("(stopped)", style="dim"))
        for reply in outcome.replies:
            if command:
                self.console.print(Text(reply, style="cyan"))
            elif outcome.status in (inbox.FAILED, inbox.DEAD):
                self.console.print(Text(reply, style="yellow"))
            else:
                self.console.print(Text.assemble(("◆ ", f"bold {ASSISTANT_STYLE}"), reply))

    def _follow(self, before: str | None, *, resumed: bool) -> None:
        """The route moved (compression, /resume): say where the conversation went."""
        after = self.terminal.session()
        if after is None or before is None or after.id == before:
            return
        if after.parent_session_id == before:
            name = f' "{after.title}"' if after.title else ""
            note = f"Context compressed: continuing in session {after.id}{name}."
            self.console.print(Text(note, style=f"dim {USER_STYLE}"))
        elif resumed:
            transcript = self.terminal.transcript(after.id)
            render_recap(self.console, after, transcript, self.settings.display.resume_display)
