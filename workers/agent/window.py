"""What the model sees: the transcript as chat messages, cut to the newest window that fits.

Each turn sends the system prompt, the newest messages that fit the model's budget
(`model.context_tokens` less the reply's reserve, the system prompt, the tools and this turn),
and the turn itself. A message's stored `token_count` (from the endpoint's usage) is used when
known; otherwise a cheap estimate: a token per 4 ASCII characters, one per other character
(CJK text runs close to a token a character, so the estimate errs on the large side).

The window starts at a user message, and a tool call is only sent with all its results (and
results only with their call), as the chat API requires.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from shared.model import MessageRecord

MESSAGE_OVERHEAD = 4  # role and framing tokens per message
DEFAULT_RESERVE = 4_096


def estimate_tokens(text: str | None) -> int:
    if not text:
        return 0
    ascii_chars = len(text.encode("ascii", "ignore"))
    return math.ceil(ascii_chars / 4) + (len(text) - ascii_chars)


def estimate_value(value: Any) -> int:
    """The estimate for a JSON-ready value (tool schemas, multimodal content parts)."""
    if isinstance(value, str):
        return estimate_tokens(value)
    if isinstance(value, list) and all(isinstance(p, dict) for p in value):
        total = 0
        for part in value:
            if part.get("type") == "image_url":
                total += 765  # a detailed 1024px image, roughly, by OpenAI's tile arithmetic
            else:
                total += estimate_tokens(str(part.get("text", "")))
        return total
    return estimate_tokens(json.dumps(value, ensure_ascii=False))


def message_tokens(message: MessageRecord) -> int:
    if message.token_count is not None and message.token_count > 0:
        return message.token_count + MESSAGE_OVERHEAD
    return estimate_tokens(message.content) + estimate_tokens(message.tool_calls) + MESSAGE_OVERHEAD


def reserve_for_reply(context_tokens: int, max_output_tokens: int | None) -> int:
    if max_output_tokens is not None:
        return max_output_tokens
    return min(DEFAULT_RESERVE, context_tokens // 8)


def to_chat(message: MessageRecord) -> dict[str, Any] | None:
    """A stored message as a chat API message (None for roles the API is not sent)."""
    if message.role == "user":
        return {"role": "user", "content": message.content or ""}
    if message.role == "assistant":
        calls = message.tool_call_list
        out: dict[str, Any] = {"role": "assistant", "content": message.content or ""}
        if calls:
            out["tool_calls"] = calls
            out["content"] = message.content or None
        return out
    if message.role == "tool":
        return {
            "role": "tool",
            "tool_call_id": message.tool_call_id or "",
            "content": message.content or "",
        }
    return None  # system rows (summaries) go into the system prompt; others are not sent


def _call_ids(message: dict[str, Any]) -> set[str]:
    return {str(c.get("id")) for c in message.get("tool_calls") or [] if isinstance(c, dict)}


def coherent(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop tool results without their call, and calls whose results are not all there."""
    out: list[dict[str, Any]] = []
    i = 0
    while i < len(messages):
        message = messages[i]
        if message["role"] == "tool":
            i += 1  # an orphan result (its call fell outside the window)
            continue
        if message["role"] == "assistant" and message.get("tool_calls"):
            wanted = _call_ids(message)
            j = i + 1
            results = []
            while j < len(messages) and messages[j]["role"] == "tool":
                results.append(messages[j])
                j += 1
            got = {str(r.get("tool_call_id")) for r in results}
            if wanted and wanted <= got:
                out.append(message)
                out.extend(r for r in results if str(r.get("tool_call_id")) in wanted)
            elif message.get("content"):  # a stopped turn: keep what it said, not its calls
                out.append({"role": "assistant", "content": message["content"]})
            i = j
            continue
        out.append(message)
        i += 1
    return out


@dataclass(frozen=True, slots=True)
class Window:
    messages: list[dict[str, Any]]
    tokens: int  # estimate of what is sent from history
    dropped: int  # history messages left out for lack of room
    history_tokens: int  # estimate of the whole history given
    summaries: list[str] = field(default_factory=list)


def build_window(history: Sequence[MessageRecord], available: int) -> Window:
    """The newest history that fits in `available` tokens, starting at a user message."""
    summaries = [m.content for m in history if m.role == "system" and m.content]
    chat = [(m, c) for m in history if (c := to_chat(m)) is not None]
    costs = [message_tokens(m) for m, _ in chat]
    history_tokens = sum(costs) + sum(estimate_tokens(s) for s in summaries)
    used = 0
    start = len(chat)
    for index in range(len(chat) - 1, -1, -1):
        if used + costs[index] > available:
            break
        used += costs[index]
        start = index
    while start < len(chat) and chat[start][1]["role"] != "user":
        used -= costs[start]
        start += 1
    kept = coherent([c for _, c in chat[start:]])
    return Window(kept, max(0, used), start, history_tokens, summaries)
