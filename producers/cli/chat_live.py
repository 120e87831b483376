"""The terminal's waiting view: the reply as the model writes it, under it one dim status line
(thinking…, a tool round such as "searching past sessions…", stopping…) with a spinner.

One Rich `Live` region redrawn in place (no flicker, no scrolling copies). It is transient:
when the turn finishes the region goes and the REPL prints the committed reply, so what stays
on screen is the transcript's text even when the live stream was partial or lost.
"""

from __future__ import annotations

from types import TracebackType

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from producers.cli.recap_view import ASSISTANT_STYLE
from shared.live import STATUS, TEXT, LiveEvent

REFRESH_PER_SECOND = 12


class LiveReply:
    def __init__(self, console: Console, status: str = "thinking…") -> None:
        self._status = status
        self._tool = ""
        self._reply = ""
        self._spinner = Spinner("dots", text=Text(status, style="dim"))
        self._live = Live(
            self._render(),
            console=console,
            transient=True,
            refresh_per_second=REFRESH_PER_SECOND,
        )

    def __enter__(self) -> LiveReply:
        self._live.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._live.stop()

    @property
    def reply(self) -> str:
        return self._reply

    def update(self, status: str) -> None:
        """What the terminal itself says (thinking… 3s, stopping…)."""
        if status != self._status:
            self._status = status
            self._live.update(self._render())

    def take(self, event: LiveEvent) -> None:
        """An event from the worker's live view."""
        if event.kind == TEXT:
            self._reply, self._tool = event.text, ""
        elif event.kind == STATUS:
            self._tool = event.text
        else:
            return
        self._live.update(self._render(), refresh=True)

    def _render(self) -> RenderableType:
        self._spinner.update(text=Text(self._tool or self._status, style="dim"))
        if not self._reply:
            return self._spinner
        said = Text.assemble(("◆ ", f"bold {ASSISTANT_STYLE}"), self._reply)
        return Group(said, self._spinner)
