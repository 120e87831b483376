"""Slash commands: recognising `/name args` (and Telegram's `/name@bot`) in a turn's text."""

from __future__ import annotations

import re
from dataclasses import dataclass

_COMMAND_RE = re.compile(r"^/(?P<name>[A-Za-z][A-Za-z0-9_]{0,31})(?:@[A-Za-z0-9_]+)?(?:\s+|$)")

KNOWN = (
    "new",
    "title",
    "compress",
    "resume",
    "sessions",
    "handoff",
    "sethome",
    "stop",
    "reset",
    "help",
)


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    args: str


def parse_command(text: str) -> Command | None:
    """`/title my project` → Command("title", "my project"); ordinary text → None."""
    stripped = text.strip()
    match = _COMMAND_RE.match(stripped)
    if match is None:
        return None
    return Command(match.group("name").lower(), stripped[match.end() :].strip())
