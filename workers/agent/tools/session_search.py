"""The `session_search` tool: the search engine's agent entry point, limited to what the
requester may see (workers.agent.visibility).

The asker's visibility goes into the engine's own queries (`Viewer`), so the best `limit`
conversations are the best the asker may see, and an ambiguous id prefix names only theirs.
`restrict` checks the result again against `visible_ids` (the rule as this package states it),
so that a gap between the two statements of the rule fails closed."""

from __future__ import annotations

from typing import Any

from shared.search import tool as search_tool
from shared.search.backend import Viewer
from workers.agent.tools.registry import Tool, ToolContext
from workers.agent.visibility import visible_ids

NAME = search_tool.TOOL_NAME
LISTS = ("results", "sessions")  # discover's and browse's lists of sessions


def _session_ids(result: dict[str, Any]) -> set[str]:
    ids = {
        str(item["session_id"])
        for name in LISTS
        for item in result.get(name) or []
        if isinstance(item, dict) and "session_id" in item
    }
    if isinstance(result.get("session_id"), str):
        ids.add(result["session_id"])
    return ids


def restrict(result: dict[str, Any], allowed: set[str]) -> dict[str, Any]:
    """Drop listed sessions the requester may not see (discover's results, browse's sessions);
    a read/scroll of one is an error."""
    if isinstance(result.get("session_id"), str) and result["session_id"] not in allowed:
        return {"mode": result.get("mode"), "error": f"no session {result['session_id']!r}"}
    for name in LISTS:
        if isinstance(result.get(name), list):
            kept = [
                item
                for item in result[name]
                if isinstance(item, dict) and item.get("session_id") in allowed
            ]
            if len(kept) != len(result[name]):
                result = {**result, name: kept, "count": len(kept)}
                if not kept and not result.get("note"):
                    result["note"] = "nothing you may see matches"
    return result


def run(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    viewer = Viewer(ctx.turn.platform, ctx.turn.user_id)
    result = search_tool.run(ctx.store, args, ctx.session_id, viewer)
    if "error" in result:
        return result
    with ctx.store.read() as conn:
        allowed = visible_ids(conn, ctx.turn.platform, ctx.turn.user_id, _session_ids(result))
    return restrict(result, allowed)


TOOL = Tool(NAME, search_tool.TOOL_SCHEMA, run, search_tool.SYSTEM_PROMPT)
