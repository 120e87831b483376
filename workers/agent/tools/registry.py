"""A small tool registry: schemas for the model, JSON arguments in, JSON text out, never raising."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from shared.db import Store
from shared.pipeline.inbox import TurnRow
from shared.ports import Clock
from shared.store.memory import MemoryOp

log = logging.getLogger(__name__)

MAX_RESULT_CHARS = 16_000


@dataclass
class ToolContext:
    """What a tool call may use: the store, whose turn it is, and the turn's pending writes."""

    store: Store
    session_id: str
    turn: TurnRow
    owner: str  # the memory identity (shared.store.memory.owner_for)
    clock: Clock
    memory_ops: list[MemoryOp] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    schema: dict[str, Any]  # the OpenAI `tools` entry: {"type": "function", "function": {...}}
    run: Callable[[ToolContext, dict[str, Any]], Any]  # JSON-ready result (or {"error": ...})
    prompt: str | None = None  # a paragraph for the system prompt


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        self._tools[tool.name] = tool

    def names(self) -> list[str]:
        return list(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        return [tool.schema for tool in self._tools.values()]

    def prompts(self) -> list[str]:
        return [tool.prompt for tool in self._tools.values() if tool.prompt]

    def call(self, name: str, arguments: str | None, ctx: ToolContext) -> str:
        """Run one tool call; every problem becomes an `{"error": ...}` the model can read."""
        return self.run(name, arguments, ctx)[0]

    def run(self, name: str, arguments: str | None, ctx: ToolContext) -> tuple[str, bool]:
        """`call`, and whether it failed (an error went back to the model)."""
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(self._tools) or "none"
            return _dump({"error": f"unknown tool {name!r}; available: {known}"}), True
        try:
            args = json.loads(arguments) if arguments and arguments.strip() else {}
        except ValueError as exc:
            return _dump({"error": f"arguments are not valid JSON: {exc}"}), True
        if not isinstance(args, dict):
            return _dump({"error": "arguments must be a JSON object"}), True
        try:
            result = tool.run(ctx, args)
        except Exception as exc:
            log.exception("tool %s failed", name)
            result = {"error": f"{name} failed: {type(exc).__name__}: {exc}"}
        return _dump(result), isinstance(result, dict) and "error" in result


def _dump(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if len(text) <= MAX_RESULT_CHARS:
        return text
    return text[:MAX_RESULT_CHARS] + f"… [cut: {len(text) - MAX_RESULT_CHARS} more characters]"
