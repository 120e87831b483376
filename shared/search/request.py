"""One session_search call's arguments, checked: from the agent's JSON or from Python callers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from shared.search.backend import Order
from shared.store.visibility import Viewer
from shared.surrogates import storable

MAX_ROW_ID = 2**63 - 1  # no row id is larger; a bigger one cannot be bound
DEFAULT_LIMIT = 3
MAX_LIMIT = 10
BROWSE_LIMIT = 10
DEFAULT_WINDOW = 5
MAX_WINDOW = 20
ROLES = ("user", "assistant", "tool", "system")
DEFAULT_ROLES = ("user", "assistant")
SORTS = {"newest": Order.NEWEST, "oldest": Order.OLDEST, "relevance": Order.RELEVANCE}
ARGUMENTS = frozenset(
    {"query", "session_id", "around_message_id", "window", "limit", "sort", "role_filter", "source"}
)


class RequestError(ValueError):
    """Arguments that do not make a call; the message says which and why."""


@dataclass(frozen=True, slots=True)
class SearchRequest:
    query: str | None = None
    session_id: str | None = None
    around_message_id: int | None = None
    window: int = DEFAULT_WINDOW
    limit: int | None = None
    sort: str | None = None
    role_filter: str | tuple[str, ...] | None = None
    source: str | None = None
    current_session_id: str | None = None
    viewer: Viewer | None = None

    @property
    def mode(self) -> str:
        if self.query is not None:
            return "discover"
        if self.session_id is not None:
            return "scroll" if self.around_message_id is not None else "read"
        return "browse"

    @property
    def order(self) -> Order:
        return SORTS[self.sort or "relevance"]

    @property
    def roles(self) -> tuple[str, ...]:
        return roles(self.role_filter)

    @property
    def discover_limit(self) -> int:
        return min(self.limit or DEFAULT_LIMIT, MAX_LIMIT)

    @property
    def browse_limit(self) -> int:
        return min(self.limit or BROWSE_LIMIT, MAX_LIMIT)

    @classmethod
    def from_args(
        cls,
        args: Mapping[str, Any],
        current_session_id: str | None = None,
        viewer: Viewer | None = None,
    ) -> SearchRequest:
        """Check the agent's arguments; raise RequestError naming the one that is wrong."""
        unknown = sorted(set(args) - ARGUMENTS)
        if unknown:
            raise RequestError(
                f"unknown argument(s) {', '.join(unknown)}; known: {', '.join(sorted(ARGUMENTS))}"
            )
        request = cls(
            query=_text(args, "query"),
            session_id=_text(args, "session_id"),
            around_message_id=_int(args, "around_message_id", None, 1, MAX_ROW_ID),
            window=_int(args, "window", DEFAULT_WINDOW, 0, MAX_WINDOW) or 0,
            limit=_int(args, "limit", None, 1, MAX_LIMIT),
            sort=_text(args, "sort"),
            role_filter=_text(args, "role_filter"),
            source=_text(args, "source"),
            current_session_id=current_session_id,
            viewer=viewer,
        )
        return request.checked()

    def checked(self) -> SearchRequest:
        """The request with window and limit held to their ranges as from JSON (too large is
        capped; negative, zero limit or not a number is a RequestError), or RequestError."""
        window = _int({"window": self.window}, "window", DEFAULT_WINDOW, 0, MAX_WINDOW)
        limit = _int({"limit": self.limit}, "limit", None, 1, MAX_LIMIT)
        if self.sort is not None and self.sort not in SORTS:
            raise RequestError(
                f"sort must be newest, oldest or omitted (relevance), not {self.sort!r}"
            )
        roles(self.role_filter)
        if self.around_message_id is not None and self.session_id is None:
            raise RequestError("around_message_id needs the session_id it belongs to")
        if self.query is not None and not self.query.strip():
            raise RequestError("query is empty; omit it to browse recent sessions")
        if window != self.window or limit != self.limit:
            return replace(self, window=window or 0, limit=limit)
        return self


def roles(role_filter: str | tuple[str, ...] | None) -> tuple[str, ...]:
    if role_filter is None:
        return DEFAULT_ROLES
    items = role_filter.split(",") if isinstance(role_filter, str) else list(role_filter)
    picked = tuple(dict.fromkeys(r.strip().lower() for r in items if r.strip()))
    bad = [r for r in picked if r not in ROLES]
    if bad or not picked:
        raise RequestError(
            f"role_filter must list roles from {', '.join(ROLES)} (comma separated), "
            f"not {role_filter!r}"
        )
    return picked


def _text(args: Mapping[str, Any], name: str) -> str | None:
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool) and name == "session_id":
        value = str(value)
    if not isinstance(value, str):
        raise RequestError(f"{name} must be a string, not {type(value).__name__}")
    value = storable(value)  # a lone surrogate cannot be bound to a statement; it matches nothing
    return value if name == "query" else (value.strip() or None)


def _int(
    args: Mapping[str, Any], name: str, default: int | None, low: int, high: int | None
) -> int | None:
    value = args.get(name)
    if value is None:
        return default
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{name} must be a whole number, not {value!r}")
    if value < low:
        raise RequestError(f"{name} must be at least {low}, not {value}")
    return value if high is None else min(value, high)
