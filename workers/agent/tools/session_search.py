"""The `session_search` tool: the search engine's agent entry point, limited to what the
requester may see (workers.agent.visibility) — the engine itself searches every session."""

from __future__ import annotations

from typing import Any

from shared.search import tool as search_tool
from workers.agent.tools.registry import Tool, ToolContext
from workers.agent.visibility import visible_ids

NAME = search_tool.TOOL_NAME


def _session_ids(result: dict[str, Any]) -> set[str]:
    ids = {str(r["session_id"]) for r in result.get("results") or [] if isinstance(r, dict)}
    if isinstance(result.get("session_id"), str):
        ids.add(result["session_id"])
    return ids


def restrict(result: dict[str, Any], allowed: set[str]) -> dict[str, Any]:
    """Drop results from sessions the requester may not see; a read/scroll of one is an error."""
    if isinstance(result.get("session_id"), str) and result["session_id"] not in allowed:
        return {"mode": result.get("mode"), "error": f"no session {result['session_id']!r}"}
    if isinstance(result.get("results"), list):
        kept = [r for r in result["results"] if r.get("session_id") in allowed]
        result = {**result, "results": kept, "count": len(kept)}
    return result


def run(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    result = search_tool.run(ctx.store, args, ctx.session_id)
    if "error" in result:
        return result
    with ctx.store.read() as conn:
        allowed = visible_ids(conn, ctx.turn.platform, ctx.turn.user_id, _session_ids(result))
    return restrict(result, allowed)


TOOL = Tool(NAME, search_tool.TOOL_SCHEMA, run, search_tool.SYSTEM_PROMPT)
