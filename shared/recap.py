"""The recap shown when a session is resumed: which messages, how much of each (pure rules).

- Only what people said is shown: user and assistant text. System messages (summaries),
  tool results and reasoning (`<think>…</think>`, role "reasoning") are hidden.
- An assistant's tool calls collapse into one line per run of calls:
  `[3 tool calls: terminal, web_search]` (names once each, in first-use order).
- The last `exchanges` exchanges (an exchange starts at a user message) are shown, with a
  count of the earlier user/assistant messages left out above them.
- User text is cut at 300 characters; assistant text at 3 lines or 200 characters, except the
  last assistant reply, which is shown in full.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shared.model import MessageRecord, SessionRecord
from shared.wording import plural

USER_CHARS = 300
ASSISTANT_CHARS = 200
ASSISTANT_LINES = 3
EXCHANGES = 10
ELLIPSIS = "…"

USER = "user"
ASSISTANT = "assistant"
TOOLS = "tools"

_THINK_RE = re.compile(r"<(think|thinking|reasoning)>.*?(</\1>|\Z)", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class RecapLine:
    kind: str  # user | assistant | tools
    text: str
    cut: bool = False


@dataclass(frozen=True, slots=True)
class Recap:
    lines: tuple[RecapLine, ...]
    earlier: int  # user/assistant messages before the first line shown
    total: int  # user/assistant messages in the session

    @property
    def empty(self) -> bool:
        return not self.lines


@dataclass
class _Entry:
    kind: str
    text: str
    index: int  # position of the message it came from
    names: list[str] | None = None
    calls: int = 0


def tool_names(tool_calls: Sequence[dict[str, Any]]) -> list[str]:
    """The function names of OpenAI-shaped tool calls (`{"function": {"name": ...}}`)."""
    names = []
    for call in tool_calls:
        if not isinstance(call, dict):
            continue
        function = call.get("function")
        name = function.get("name") if isinstance(function, dict) else call.get("name")
        names.append(str(name) if name else "tool")
    return names


def visible_text(content: str | None) -> str:
    """Assistant text without reasoning blocks, trimmed."""
    if not content:
        return ""
    return _THINK_RE.sub("", content).strip()


def _entries(messages: Sequence[MessageRecord]) -> list[_Entry]:
    entries: list[_Entry] = []
    for index, message in enumerate(messages):
        if message.role == USER:
            text = (message.content or "").strip()
            if text:
                entries.append(_Entry(USER, text, index))
            continue
        if message.role != ASSISTANT:
            continue  # system, tool results, reasoning
        text = visible_text(message.content)
        if text:
            entries.append(_Entry(ASSISTANT, text, index))
        names = tool_names(message.tool_call_list)
        if not names:
            continue
        last = entries[-1] if entries else None
        if last is not None and last.kind == TOOLS and last.names is not None:
            last.calls += len(names)
            last.names.extend(n for n in names if n not in last.names)
        else:
            unique = list(dict.fromkeys(names))
            entries.append(_Entry(TOOLS, "", index, names=unique, calls=len(names)))
    return entries


def cut_user(text: str) -> tuple[str, bool]:
    if len(text) <= USER_CHARS:
        return text, False
    return text[:USER_CHARS].rstrip() + ELLIPSIS, True


def cut_assistant(text: str) -> tuple[str, bool]:
    lines = text.splitlines()
    cut = False
    if len(lines) > ASSISTANT_LINES:
        text = "\n".join(lines[:ASSISTANT_LINES]).rstrip()
        cut = True
    if len(text) > ASSISTANT_CHARS:
        text = text[:ASSISTANT_CHARS].rstrip()
        cut = True
    return (text + ELLIPSIS if cut else text), cut


def tools_text(calls: int, names: Sequence[str]) -> str:
    return f"[{plural(calls, 'tool call')}: {', '.join(names)}]"


def _counted(message: MessageRecord) -> bool:
    return message.role in (USER, ASSISTANT)


def build_recap(
    messages: Sequence[MessageRecord],
    *,
    exchanges: int = EXCHANGES,
    session_messages: int | None = None,
) -> Recap:
    """The recap of a transcript (oldest first).

    `messages` may be only the newest part of the session: `session_messages` (the session's
    message_count) then says how many there are in all, and the ones not given count as
    earlier messages (all of them: the unread part is not sorted by role).
    """
    entries = _entries(messages)
    unread = max(0, session_messages - len(messages)) if session_messages is not None else 0
    total = unread + sum(1 for m in messages if _counted(m))
    starts = [i for i, entry in enumerate(entries) if entry.kind == USER]
    first = starts[-exchanges] if len(starts) > exchanges else 0
    shown = entries[first:]
    earlier = unread + sum(1 for m in messages[: shown[0].index] if _counted(m)) if shown else total
    last_reply = max((i for i, e in enumerate(shown) if e.kind == ASSISTANT), default=-1)
    lines = []
    for i, entry in enumerate(shown):
        if entry.kind == USER:
            text, cut = cut_user(entry.text)
        elif entry.kind == ASSISTANT:
            text, cut = (entry.text, False) if i == last_reply else cut_assistant(entry.text)
        else:
            text, cut = tools_text(entry.calls, entry.names or []), False
        lines.append(RecapLine(entry.kind, text, cut))
    return Recap(tuple(lines), earlier, total)


def minimal_line(session: SessionRecord, messages: int) -> str:
    """`display.resume_display: minimal`: one line instead of the panel."""
    title = f' "{session.title}"' if session.title else ""
    return f"Resumed session {session.id}{title} — {plural(messages, 'message')}."
