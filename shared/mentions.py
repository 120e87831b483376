"""Platform mentions of the bot in message text: Telegram `@hermes_bot`, Slack `<@U0123ABC>`
(or `<@U0123ABC|name>`), Discord `<@123>` / `<@!123>`. The transcript keeps them as they were
said; what sums a session up (list and browse previews, auto-titles) leaves them out.

Previews and titles are made without knowing which account the bot is, so every mention in
a platform's raw id form goes (an id says nothing to a reader), and on Telegram every
username of a bot (they all end in "bot").
"""

from __future__ import annotations

import re

_MENTION = re.compile(
    r"\s*(?:"
    r"<@[UW][A-Z0-9]+(?:\|[^>]*)?>"  # Slack
    r"|<@!?\d+>"  # Discord
    r"|(?<![\w.@])@[A-Z][A-Z0-9_]{1,28}bot\b"  # a Telegram bot's username
    r")",
    re.IGNORECASE,
)
_LEADING = re.compile(r"^[\s:,]+")


def without_mentions(text: str) -> str:
    """`text` without mentions (and the space before each, the `:`/`,` after a leading one)."""
    if "@" not in text:
        return text
    return _LEADING.sub("", _MENTION.sub("", text))
