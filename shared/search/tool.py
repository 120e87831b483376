"""The agent tool `session_search`: its JSON schema, description, system-prompt paragraph, entry."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.db.engine import Store
from shared.search.calls import error, search
from shared.search.request import DEFAULT_WINDOW, MAX_LIMIT, MAX_WINDOW, RequestError, SearchRequest
from shared.store.visibility import Viewer

TOOL_NAME = "session_search"

TOOL_DESCRIPTION = (
    "Recall earlier conversations (all past sessions you may see, not the current one). "
    "Four shapes, chosen by the arguments: "
    "(1) discover: pass `query` to full-text search; one result per conversation, each with a "
    "snippet, the first and last messages (bookends) and a window of messages around the "
    'match (the match has "anchor": true). '
    "(2) scroll: pass `session_id` and `around_message_id` to see the messages around one "
    "message; pass the first or last id of a window to move backwards or forwards. "
    "messages_before/messages_after count the messages shown before/after the anchor in this "
    "window: fewer than `window` means you reached the start/end of the conversation. "
    "(3) read: pass `session_id` alone for that conversation (long ones are shortened). "
    "(4) browse: no arguments lists recent conversations. "
    'Query syntax: words must all appear (AND), "exact phrase", OR, NOT, prefix*; Chinese, '
    "Japanese and similar text is matched as a substring."
)

TOOL_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": TOOL_DESCRIPTION,
        "parameters": {
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": 'What to find, e.g. deploy staging, "rate limit", migrat*, '
                    "postgres OR sqlite, 部署. Omit to browse or to scroll/read a session.",
                },
                "session_id": {
                    "type": "string",
                    "description": "A session from earlier results: read it, or scroll in it "
                    "with around_message_id.",
                },
                "around_message_id": {
                    "type": "integer",
                    "description": "A message id from earlier results to centre the window on.",
                },
                "window": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": MAX_WINDOW,
                    "default": DEFAULT_WINDOW,
                    "description": "Messages shown on each side of the match or anchor.",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_LIMIT,
                    "description": "Conversations returned (discover: default 3; browse: 10).",
                },
                "sort": {
                    "type": "string",
                    "enum": ["newest", "oldest"],
                    "description": "Order by time instead of relevance (the default).",
                },
                "role_filter": {
                    "type": "string",
                    "description": "Comma list of roles to search and show: user, assistant, "
                    "tool, system. Default user,assistant; add tool to search tool output.",
                },
                "source": {
                    "type": "string",
                    "description": "Only sessions from this platform (cli, telegram, slack, ...).",
                },
            },
            "additionalProperties": False,
        },
    },
}

SYSTEM_PROMPT = (
    "You can recall earlier conversations with the session_search tool. When the user refers "
    'to something from before ("like we discussed", "last week", "that script you wrote", '
    '"did I tell you about...") or you need context this conversation does not hold, search '
    "for it instead of guessing: start with a few distinctive words, then scroll around the "
    "match or read the session if you need more. The current conversation is not searched; "
    "you already have it."
)


def run(
    store: Store,
    args: Mapping[str, Any] | None,
    current_session_id: str | None,
    viewer: Viewer | None = None,
) -> dict[str, Any]:
    """The tool call: JSON arguments in, a JSON-ready result or error object out; never raises
    for anything the model sent. `viewer` (who asks) limits it to the sessions they may see."""
    try:
        if args is not None and not isinstance(args, Mapping):
            raise RequestError("arguments must be a JSON object")
        request = SearchRequest.from_args(args or {}, current_session_id, viewer)
    except RequestError as exc:
        mode = SearchRequest(query=_maybe(args, "query"), session_id=_maybe(args, "session_id"))
        return error(mode.mode, str(exc))
    return search(store, request)


def _maybe(args: Any, key: str) -> str | None:
    if isinstance(args, Mapping) and isinstance(args.get(key), str):
        return str(args[key])
    return None
