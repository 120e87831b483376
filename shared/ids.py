"""Session ids: `YYYYMMDD_HHMMSS_<hex>` — 6 hex digits for CLI sessions, 8 for gateway sessions."""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime

CLI_HEX = 6
GATEWAY_HEX = 8
# Exactly 6 (CLI) or 8 (gateway) hex digits; \Z, not $, so "id\n" is not an id.
ID_PATTERN = re.compile(r"^\d{8}_\d{6}_(?:[0-9a-f]{6}|[0-9a-f]{8})\Z")


# What any session id must be wherever one enters from outside (import, the CLI, a tool's
# argument): ours match ID_PATTERN; ids imported from elsewhere may be shaped otherwise, but an
# id names a folder under media/, so never a path separator, "..", a leading dot, whitespace
# or a control character.
SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@+-]{0,127}\Z")


def is_safe_session_id(text: object) -> bool:
    return isinstance(text, str) and bool(SAFE_ID.match(text)) and ".." not in text


def new_session_id(now: datetime, *, gateway: bool = False) -> str:
    """A fresh id stamped with `now` (UTC) and random hex."""
    stamp = now.astimezone(UTC).strftime("%Y%m%d_%H%M%S")
    return f"{stamp}_{secrets.token_hex((GATEWAY_HEX if gateway else CLI_HEX) // 2)}"


def looks_like_session_id(text: str) -> bool:
    return bool(ID_PATTERN.match(text))
