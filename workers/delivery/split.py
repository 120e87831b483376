"""Splitting a long reply into parts a platform accepts: at paragraphs, then lines, then words.

Each platform measures its limit its own way (its descriptor's `message_limit` and `utf16`):
Telegram counts UTF-16 code units (an emoji outside the BMP is two), Slack and Discord count
characters. Parts never end inside a
character (so never inside a surrogate pair), and a cut prefers the last paragraph break, then
line break, then space in the second half of the window, so parts are not needlessly short.
"""

from __future__ import annotations

from collections.abc import Callable

from shared.platforms.descriptor import Platform

Measure = Callable[[str], int]

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


def split_for(platform: Platform, text: str) -> list[str]:
    """`text` as the parts `platform` accepts (its descriptor's limit and measure)."""
    return split_text(text, platform.message_limit, utf16_units if platform.utf16 else chars)
