"""Strings from outside made storable: a lone UTF-16 surrogate or a NUL becomes U+FFFD.

JSON may escape half of a surrogate pair (`"\\ud800"`), and `json.loads` of bytes accepts
CESU-8; Python keeps such a code point, but neither SQLite nor PostgreSQL can store it (nor
can PostgreSQL store NUL in text), and a platform that sent one would be answered 503 and
redeliver it for days (a long-polling receiver would stall behind it). Replacing the one
character keeps the rest of the message, identically on both databases.
"""

from __future__ import annotations

import re
from typing import Any

LONE_SURROGATE = re.compile("[\x00\ud800-\udfff]")
# What a body must hold for its parse to hold one: an escaped surrogate or NUL, or CESU-8.
SUSPECT_BYTES = re.compile(rb"\\u[dD][89a-fA-F]|\\u0000|\xed[\xa0-\xbf]")


def storable(text: str) -> str:
    # An ASCII text without a NUL holds neither (a lone surrogate is not ASCII): most texts,
    # and a check is cheaper than the regex substitution (the SMS receiver calls this per field).
    if text.isascii() and "\x00" not in text:
        return text
    return LONE_SURROGATE.sub("\ufffd", text)


def scrub(data: Any) -> Any:
    """`data` (parsed JSON) with every string in it storable, keys too; in place, any depth."""
    if isinstance(data, str):
        return storable(data)
    pending = [data]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            for key in list(node):
                value = _clean(node[key], pending)
                if isinstance(key, str) and LONE_SURROGATE.search(key):
                    del node[key]
                    node[storable(key)] = value
                else:
                    node[key] = value
        elif isinstance(node, list):
            for index, value in enumerate(node):
                node[index] = _clean(value, pending)
    return data


def scrub_body(body: bytes, data: Any) -> Any:
    """`scrub(data)` when `body` (what `data` was parsed from) could hold a lone surrogate.
    (Most bodies hold neither a backslash-u nor the byte 0xED, and `in` finds that sooner.)"""
    if b"\\u" not in body and b"\xed" not in body:
        return data
    return scrub(data) if SUSPECT_BYTES.search(body) else data


def _clean(value: Any, pending: list[Any]) -> Any:
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, dict | list):
        pending.append(value)
    return value
