"""The resume recap on a terminal (rules in shared.recap): user gold ●, assistant green ◆, dim."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text

from shared.model import MessageRecord, SessionRecord
from shared.recap import ASSISTANT, USER, build_recap, minimal_line
from shared.wording import plural

USER_STYLE = "gold1"
ASSISTANT_STYLE = "green"


def _title(session: SessionRecord) -> str:
    return f"{session.title} · {session.id}" if session.title else session.id


def render_recap(
    console: Console, session: SessionRecord, transcript: Sequence[MessageRecord], mode: str
) -> None:
    """Print the recap panel (`full`) or one line (`minimal`) for a resumed session."""
    recap = build_recap(transcript, session_messages=session.message_count)
    if mode == "minimal":
        console.print(Text(minimal_line(session, recap.total), style="dim"))
        return
    rows: list[Text] = []
    if recap.earlier:
        earlier = plural(recap.earlier, "earlier message")
        rows.append(Text(f"... {earlier} ...", style="dim italic"))
    for line in recap.lines:
        if line.kind == USER:
            row = Text.assemble(("● ", f"bold {USER_STYLE}"), (line.text, USER_STYLE))
        elif line.kind == ASSISTANT:
            row = Text.assemble(("◆ ", f"bold {ASSISTANT_STYLE}"), (line.text, ASSISTANT_STYLE))
        else:
            row = Text("  " + line.text, style="italic")
        rows.append(row)
    if not rows:
        rows.append(Text("(no messages yet)", style="italic"))
    console.print(
        Panel(
            Group(*rows),
            title=f"Resumed {_title(session)}",
            title_align="left",
            subtitle=plural(recap.total, "message"),
            subtitle_align="right",
            style="dim",
            border_style="dim",
        )
    )
