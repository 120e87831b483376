"""The `session_search` tool: the search engine's agent entry point, limited to what the asker
may reach (`shared.store.visibility`: on the terminal every session, on a platform the
sender's own). The rule goes into the engine's own queries, so the best `limit`
conversations are the best the asker may see, and an ambiguous id prefix names only theirs."""

from __future__ import annotations

from typing import Any

from shared.search import tool as search_tool
from shared.store.visibility import Viewer
from workers.agent.tools.registry import Tool, ToolContext

NAME = search_tool.TOOL_NAME


def run(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    viewer = Viewer(ctx.turn.platform, ctx.turn.user_id)
    return search_tool.run(ctx.store, args, ctx.session_id, viewer)


TOOL = Tool(NAME, search_tool.TOOL_SCHEMA, run, search_tool.SYSTEM_PROMPT)
