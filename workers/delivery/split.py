"""Splitting a long reply into parts a platform accepts: at paragraphs, then lines, then words.

Each platform measures its limit its own way: Telegram counts UTF-16 code units (an emoji
outside the BMP is two), Slack and Discord count characters. Parts never end inside a
character (so never inside a surrogate pair), and a cut prefers the last paragraph break, then
line break, then space in the second half of the window, so parts are not needlessly short.
"""

from __future__ import annotations

from collections.abc import Callable

Measure = Callable[[str], int]

TELEGRAM_LIMIT = 4096  # UTF-16 code units of the text after entities are parsed (plain text)
SLACK_LIMIT = 4000  # Slack truncates at 40,000 characters but asks for at most 4,000
DISCORD_LIMIT = 2000  # characters of `content`

_BREAKS = ("\n\n", "\n", " ")


def utf16_units(text: str) -> int:
    """Length in UTF-16 code units, as Telegram counts it."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def chars(text: str) -> int:
    return len(text)


def _fit(text: str, limit: int, measure: Measure) -> int:
    """The most leading characters of `text` whose measure is within `limit` (at least 1)."""
    if measure is chars:
        return max(1, min(len(text), limit))
    low, high = 1, min(len(text), limit)
    while low < high:  # measure is monotonic in the prefix length
        mid = (low + high + 1) // 2
        if measure(text[:mid]) <= limit:
            low = mid
        else:
            high = mid - 1
    return low


def _cut(window: str) -> int:
    """Where to end a part inside `window` (its full length when nothing better is found)."""
    half = len(window) // 2
    for sep in _BREAKS:
        at = window.rfind(sep)
        if at >= half:
            return at
    for sep in _BREAKS:
        at = window.rfind(sep)
        if at > 0:
            return at
    return len(window)


def split_text(text: str, limit: int, measure: Measure = chars) -> list[str]:
    """`text` as parts of at most `limit` (by `measure`), in order; whitespace-only → []."""
    if limit < 2:
        raise ValueError("limit must be at least 2")
    rest = text.strip()
    parts: list[str] = []
    while rest:
        if measure(rest) <= limit:
            parts.append(rest)
            break
        window = rest[: _fit(rest, limit, measure)]
        at = _cut(window)
        part = rest[:at].rstrip()
        if not part:  # the window was all whitespace before the cut: take it whole
            part, at = window, len(window)
        parts.append(part)
        rest = rest[at:].lstrip()
    return parts
