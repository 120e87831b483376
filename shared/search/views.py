"""Shaping what search hands back: message and session dicts, clipping, snippets, lineage roots."""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from shared.model import SessionRecord
from shared.search.query import Term
from shared.search.reads import Message

ANCHOR_CHARS = 2000
WINDOW_CHARS = 600
BOOKEND_CHARS = 300
PREVIEW_CHARS = 120
SNIPPET_CHARS = 160
MAX_LINEAGE_DEPTH = 64
MARK_OPEN, MARK_CLOSE, ELLIPSIS = "⟦", "⟧", "…"


def when(timestamp: float | None) -> str | None:
    """A timestamp as ISO 8601 UTC to the second (what the agent and scripts read)."""
    if timestamp is None:
        return None
    # time.gmtime, not datetime: half the cost, and a discover formats ~50 of these
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(timestamp))


def clip(text: str | None, chars: int) -> str:
    if not text:
        return ""
    if len(text) <= chars:
        return text
    return f"{text[:chars].rstrip()}{ELLIPSIS} [+{len(text) - chars} chars]"


def message_dict(record: Message, chars: int, *, anchor: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": record.id,
        "role": record.role,
        "when": when(record.timestamp),
        "content": clip(record.content, chars),
    }
    if record.tool_name:
        out["tool_name"] = record.tool_name
    if record.tool_calls:  # most messages have none: no list built for them
        calls = [_call_name(call) for call in record.tool_call_list]
        if calls:
            out["tool_calls"] = calls
    if anchor:
        out["anchor"] = True
    return out


def _call_name(call: dict[str, Any]) -> str:
    function = call.get("function")
    name = function.get("name") if isinstance(function, dict) else call.get("name")
    return str(name or "?")


def session_dict(record: SessionRecord) -> dict[str, Any]:
    return {
        "session_id": record.id,
        "title": record.title,
        "source": record.source,
        "started": when(record.started_at),
        "last_active": when(record.last_active_at),
        "ended": when(record.ended_at),
        "message_count": record.message_count,
        "parent_session_id": record.parent_session_id,
    }


def lineage_roots(
    parents: Callable[[Iterable[str]], dict[str, str | None]],
    session_ids: Iterable[str],
    cache: dict[str, str],
    known: Mapping[str, str | None] | None = None,
) -> None:
    """Fill `cache` with each session's lineage root: parent_session_id followed to the top
    (a missing parent, a cycle or MAX_LINEAGE_DEPTH hops end the walk). `known`: parents the
    caller already read (session rows at hand), asked of `parents` no more; a walk where every
    session is known and none has a parent reads nothing."""
    known = known or {}
    parent_of: dict[str, str | None] = {}
    pending = {sid for sid in session_ids if sid not in cache}
    frontier = set(pending)
    for _ in range(MAX_LINEAGE_DEPTH):
        frontier = {sid for sid in frontier if sid not in parent_of and sid not in cache}
        if not frontier:
            break
        asked = {sid for sid in frontier if sid not in known}
        found = parents(asked) if asked else {}
        for sid in frontier:
            parent_of[sid] = known[sid] if sid in known else found.get(sid)
        frontier = {p for sid in frontier if (p := parent_of[sid]) is not None}
    for sid in pending:
        node, seen = sid, {sid}
        while (parent := parent_of.get(node)) is not None and parent not in seen:
            if parent in cache:
                node = cache[parent]
                break
            seen.add(parent)
            node = parent
        cache[sid] = node


def _needle(term: Term, words: bool) -> str:
    parts = term.text.split() if not words else re.findall(r"\w+", term.text)
    if not words:
        return r"\s+".join(re.escape(p) for p in parts)
    body = r"\W+".join(re.escape(p) for p in parts)
    return rf"\b{body}" + (r"\w*" if term.prefix else r"\b")


def highlight(text: str, terms: Sequence[Term], *, words: bool, chars: int = SNIPPET_CHARS) -> str:
    """A piece of `text` around the first match of `terms`, each match marked: as words (word
    boundaries, `prefix*`) or as substrings (Chinese, Japanese...), ignoring case."""
    pattern = _pattern(tuple(terms), words)
    flat = " ".join(text.split())
    if pattern is None or not flat:
        return clip(flat, chars)
    first = pattern.search(flat)
    start = 0 if first is None else max(0, first.start() - chars // 3)
    piece = flat[start : start + chars]
    marked = pattern.sub(_marked, piece)
    return (ELLIPSIS if start else "") + marked + (ELLIPSIS if start + chars < len(flat) else "")


@functools.lru_cache(maxsize=256)
def _pattern(terms: tuple[Term, ...], words: bool) -> re.Pattern[str] | None:
    """What `highlight` marks for these terms (None: nothing), built once for all of a call's
    results (~5 us a result) rather than once each."""
    needles = [n for n in (_needle(t, words) for t in terms) if n and n not in (r"\b\b", "")]
    if not needles:
        return None
    return re.compile("|".join(sorted(needles, key=len, reverse=True)), re.IGNORECASE)


def _marked(match: re.Match[str]) -> str:
    return f"{MARK_OPEN}{match.group(0)}{MARK_CLOSE}"
