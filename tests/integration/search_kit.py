"""What the session_search tests share: a store writer with a clock (`Log`, the `log` fixture
in conftest.py) and small helpers for calling the tool and reading its results."""

from __future__ import annotations

import json
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from shared.db import Store
from shared.search.backend import SearchBackend
from shared.search.calls import backend_for
from shared.search.tool import run
from shared.store.messages import append_message
from shared.store.sessions import create_session


class Log:
    """Writes sessions into the store with increasing timestamps; remembers message ids."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.clock = 1_700_000_000.0
        self.ids: dict[str, list[int]] = {}

    def session(
        self,
        sid: str,
        texts: Sequence[str | tuple[str, str]],
        *,
        parent: str | None = None,
        title: str | None = None,
        source: str = "cli",
    ) -> list[int]:
        """`texts` alternate user/assistant unless given as (role, text)."""
        with self.store.write() as conn:
            create_session(
                conn,
                session_id=sid,
                source=source,
                now=self.clock,
                title=title,
                parent_session_id=parent,
            )
            for i, item in enumerate(texts):
                default = ("user", "assistant")[i % 2]
                role, text = item if isinstance(item, tuple) else (default, item)
                self.clock += 1
                mid = append_message(conn, sid, role, text, now=self.clock)
                self.ids.setdefault(sid, []).append(mid)
        return self.ids[sid]


def call(store: Store, current: str | None = None, **args: Any) -> dict[str, Any]:
    result = run(store, args, current)
    json.dumps(result)  # always plain JSON data
    return result


def ids(result: dict[str, Any]) -> list[str]:
    return [r["session_id"] for r in result["results"]]


def filler(n: int, word: str = "filler") -> list[str]:
    return [f"{word} line {i}" for i in range(n)]


def backend_of(store: Store) -> SearchBackend:
    """The search backend module of the store's dialect."""
    found = backend_for(store.dialect)
    assert found is not None
    return found


def limits_of(store: Store) -> ModuleType:
    """The module holding the dialect's search limits, read when a search runs, so tests tune
    them there: SQLite's backend itself; PostgreSQL's `shared.search.postgresql.limits`."""
    if store.dialect == "postgresql":
        from shared.search.postgresql import limits

        return limits
    from shared.search.sqlite import backend

    return backend
