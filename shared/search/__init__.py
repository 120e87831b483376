"""Search over every stored conversation: the `session_search` tool, `hermes sessions search`.

`search(store, SearchRequest(...))` for code; `tool.run(store, args, current_session_id)` for
the agent (a `Viewer` limits either to what the asker may see); `query.parse` for the query
language. Dialects plug in through `backend`.
"""

from shared.search.calls import search
from shared.search.query import QueryError, parse
from shared.search.request import RequestError, SearchRequest
from shared.store.visibility import Viewer

__all__ = ["QueryError", "RequestError", "SearchRequest", "Viewer", "parse", "search"]
