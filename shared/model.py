"""Frozen records the store hands out: a session row and a message row."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True, slots=True)
class SessionRecord:
    id: str
    source: str
    started_at: float
    last_active_at: float
    user_id: str | None = None
    session_key: str | None = None
    chat_id: str | None = None
    chat_type: str | None = None
    thread_id: str | None = None
    title: str | None = None
    title_source: str | None = None
    model: str | None = None
    model_config: str | None = None
    system_prompt: str | None = None
    parent_session_id: str | None = None
    ended_at: float | None = None
    end_reason: str | None = None
    message_count: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    @classmethod
    def from_row(cls, row: Any) -> SessionRecord:
        return cls.from_mapping(row._mapping)

    @classmethod
    def from_mapping(cls, data: Mapping[Any, Any]) -> SessionRecord:
        return cls(**{name: data[name] for name in _FIELDS[cls] if name in data})

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class MessageRecord:
    id: int
    session_id: str
    role: str
    content: str | None
    timestamp: float
    tool_calls: str | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    token_count: int | None = None
    platform_message_id: str | None = None

    @classmethod
    def from_row(cls, row: Any) -> MessageRecord:
        return cls.from_mapping(row._mapping)

    @classmethod
    def from_mapping(cls, data: Mapping[Any, Any]) -> MessageRecord:
        return cls(**{name: data[name] for name in _FIELDS[cls] if name in data})

    @property
    def tool_call_list(self) -> list[dict[str, Any]]:
        """The decoded `tool_calls` JSON (an empty list when there are none or it is unreadable)."""
        return tool_call_list(self.tool_calls)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def tool_call_list(tool_calls: str | None) -> list[dict[str, Any]]:
    """A message's `tool_calls` JSON decoded (an empty list when there are none or it is
    unreadable)."""
    if not tool_calls:
        return []
    try:
        value = json.loads(tool_calls)
    except ValueError:
        return []
    return value if isinstance(value, list) else []


# Field names per record type, looked up once (rows are turned into records on hot paths).
_FIELDS: dict[type, tuple[str, ...]] = {
    cls: tuple(f.name for f in fields(cls)) for cls in (SessionRecord, MessageRecord)
}
