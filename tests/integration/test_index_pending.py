"""The search indexes' pending lists (PostgreSQL's GIN): moved into the indexes by beat's
pending sweep, and after `hermes db copy`, so no writer finds one full and waits while it is
moved. Both databases: SQLite's FTS5 has no such list, and the sweep does nothing there."""

from __future__ import annotations

import pytest

from shared.db import Store, open_store
from shared.search import SearchRequest, search
from shared.settings import Settings
from shared.store import messages, reclaim
from shared.store.sessions import create_session
from tests.integration.test_db_copy import copy, fill, pg_target  # noqa: F401 (a fixture)
from tests.pipeline_helpers import make_runtime
from workers.sweeps import index

pytestmark = pytest.mark.both_databases


def _append(store: Store, count: int) -> None:
    with store.write() as conn:
        create_session(conn, session_id="s1", source="cli", now=1)
    for n in range(count):  # one transaction each, as turns write them
        with store.write() as conn:
            row = messages.NewRow("user", f"zanzibar ledger entry {n} 中文字 pending", 2 + n)
            messages.append_messages(conn, "s1", [row])


def test_the_pending_sweep_moves_every_search_index_list_in_and_search_still_finds_all(
    settings: Settings, store: Store
) -> None:
    _append(store, 60)
    rt, _ = make_runtime(settings, store)
    first = index.pending_sweep(rt)
    again = index.pending_sweep(rt)
    hits = search(store, SearchRequest(query="zanzibar ledger", limit=5))
    assert hits["results"] and {hit["session_id"] for hit in hits["results"]} == {"s1"}
    if store.dialect != "postgresql":
        assert first == again == index.PendingReport("not-needed")
        return
    assert first.reason == "flushed" and first.pages > 0, first
    assert again == index.PendingReport("flushed", 0)  # nothing left pending
    moved = reclaim.flush_pending_lists(store)
    assert set(moved) >= {
        "ix_messages_search_words",
        "ix_messages_search_grams",
        "ix_messages_search_pairs",
        "ix_messages_search_prefixes",
    }, moved


def test_a_copy_into_postgresql_leaves_nothing_pending(
    hermes_env: dict[str, str],
    store: Store,
    pg_target: str,  # noqa: F811 (the fixture imported above)
) -> None:
    if store.dialect != "sqlite":
        pytest.skip("the copy's source here is a SQLite file")
    fill(store)
    done = copy(hermes_env, f"sqlite:///{store.path}", pg_target)
    assert done.returncode == 0, done.stderr
    target = open_store(pg_target)
    try:
        moved = reclaim.flush_pending_lists(target)
    finally:
        target.close()
    assert moved and set(moved.values()) == {0}, moved
