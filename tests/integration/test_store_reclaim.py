"""shared.store.reclaim: bounded delete batches, a guard in every write, space back in steps."""

from __future__ import annotations

import pytest
from sqlalchemy import Connection, text

from shared.db import Store
from shared.db import sqlite as store_sqlite
from shared.store import reclaim as reclaim_store
from shared.store import sessions as session_rows
from shared.store.messages import append_message
from tests.integration.storekit import fill_in_segments, fts_integrity_check, fts_segment_counts

NOW = 1_750_000_000.0
DAY = 86_400.0


def _ended(store: Store, count: int, messages: int) -> None:
    body = "lorem ipsum dolor sit amet " * 40
    with store.write() as conn:
        for i in range(count):
            sid = f"20250101_{i:06d}_abcdef"
            session_rows.create_session(conn, session_id=sid, source="cli", now=NOW - 200 * DAY)
            for _ in range(messages):
                append_message(conn, sid, "user", body, now=NOW - 200 * DAY)
            session_rows.end_session(conn, sid, "idle", NOW - 100 * DAY)


def _count(store: Store, table: str) -> int:
    with store.read() as conn:
        return int(conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())


def test_batches_stay_within_their_bounds_and_pause_after_each(store: Store) -> None:
    _ended(store, 30, 4)
    pacing = reclaim_store.Pacing(batch_sessions=7, batch_messages=10, pause_s=0.5)
    heard: list[tuple[int, int]] = []
    paused: list[float] = []
    done = reclaim_store.prune_in_batches(
        store,
        ended_before=NOW - 90 * DAY,
        pacing=pacing,
        sleep=paused.append,
        progress=lambda s, m: heard.append((s, m)),
    )
    assert done == (30, 120)
    assert all(s <= 7 and m <= 10 for s, m in heard)
    assert sum(s for s, _ in heard) == 30 and sum(m for _, m in heard) == 120
    assert paused == [0.5] * len(heard)
    assert _count(store, "sessions") == 0 and _count(store, "messages") == 0


def test_a_failing_guard_stops_the_prune_before_its_batch(store: Store) -> None:
    _ended(store, 10, 2)
    calls: list[bool] = []

    def guard(conn: Connection) -> None:
        assert conn.in_transaction()
        calls.append(True)
        if len(calls) == 3:
            raise RuntimeError("lease lost")

    pacing = reclaim_store.Pacing(batch_sessions=2, batch_messages=200)
    with pytest.raises(RuntimeError, match="lease lost"):
        reclaim_store.prune_in_batches(
            store, ended_before=NOW, pacing=pacing, sleep=lambda _s: None, guard=guard
        )
    assert _count(store, "sessions") == 6  # two batches of two went; the third never ran


def test_space_comes_back_in_steps_of_the_given_size(store: Store) -> None:
    _ended(store, 40, 5)
    reclaim_store.prune_in_batches(
        store, ended_before=NOW, pacing=reclaim_store.Pacing(), sleep=lambda _s: None
    )
    assert reclaim_store.incremental(store)
    steps: list[int] = []
    guarded: list[bool] = []
    done = reclaim_store.reclaim_space(
        store,
        pacing=reclaim_store.Pacing(step_pages=16),
        sleep=lambda _s: None,
        guard=lambda _conn: guarded.append(True),
        progress=steps.append,
    )
    assert len(steps) > 1 and all(0 < step <= 16 for step in steps)
    assert done.pages_freed == sum(steps) and len(guarded) == len(steps)
    assert done.bytes_after < done.bytes_before
    with store.read() as conn:
        assert conn.execute(text("PRAGMA freelist_count")).scalar_one() == 0


def _free_pages(store: Store) -> int:
    with store.read() as conn:
        return int(conn.execute(text("PRAGMA freelist_count")).scalar_one())


def test_one_reclaim_step_frees_the_pages_it_asks_for(store: Store) -> None:
    """Python's sqlite3 steps `PRAGMA incremental_vacuum(N)` once, which frees one page; a
    step must free all N it asks for."""
    _ended(store, 80, 6)
    reclaim_store.prune_in_batches(
        store, ended_before=NOW, pacing=reclaim_store.Pacing(), sleep=lambda _s: None
    )
    free = _free_pages(store)
    assert free > 100
    with store.write() as conn:
        step = store_sqlite.reclaim_step(conn, 64)
    assert step == (64, free - 64)
    assert _free_pages(store) == free - 64
    with store.write() as conn:  # never more than there is
        assert store_sqlite.reclaim_step(conn, free) == (free - 64, 0)


def _matches(store: Store, query: str) -> list[int]:
    with store.read() as conn:
        rows = conn.execute(
            text("SELECT rowid FROM messages_fts WHERE messages_fts MATCH :q ORDER BY rowid"),
            {"q": query},
        ).scalars()
        return list(rows)


def _automerge(store: Store) -> dict[str, int]:
    with store.read() as conn:
        return {
            table: conn.execute(
                text(f"SELECT v FROM {table}_config WHERE k = 'automerge'")
            ).scalar_one()
            for table in store_sqlite.FTS_INDEXES
        }


def test_a_full_merge_goes_in_guarded_steps_and_leaves_one_segment(store: Store) -> None:
    fill_in_segments(store, sessions=40, started=NOW - 200 * DAY, ended=NOW - 100 * DAY, prefix="a")
    fill_in_segments(store, sessions=5, started=NOW - DAY, ended=None, prefix="b")
    reclaim_store.prune_in_batches(
        store, ended_before=NOW - 90 * DAY, pacing=reclaim_store.Pacing(), sleep=lambda _s: None
    )
    before = fts_segment_counts(store)
    assert all(count > 1 for count in before.values())
    expected = _matches(store, "deploy")
    guarded: list[bool] = []
    paused: list[float] = []
    merged = reclaim_store.merge_indexes(
        store,
        pacing=reclaim_store.Pacing(merge_pages=16, pause_s=0.25),
        sleep=paused.append,
        full=True,
        guard=lambda conn: guarded.append(conn.in_transaction()),
    )
    assert fts_segment_counts(store) == {"messages_fts": 1, "messages_cjk": 1}
    assert (merged.segments_before, merged.segments_after) == (sum(before.values()), 2)
    assert merged.steps > 2  # in bounded steps, each in its own guarded write
    # Each step is its own guarded write, and so is holding back the appends' merging.
    assert guarded == [True] * (merged.steps + 1) and paused == [0.25] * merged.steps
    assert _automerge(store) == {"messages_fts": 4, "messages_cjk": 4}  # appends merge again
    assert _matches(store, "deploy") == expected and len(expected) == 20
    with store.read() as conn:
        fts_integrity_check(conn)


def test_a_failing_guard_stops_the_merge_and_the_index_stays_whole(store: Store) -> None:
    fill_in_segments(store, sessions=40, started=NOW - DAY, ended=None, prefix="a")
    calls: list[bool] = []

    def guard(_conn: Connection) -> None:
        calls.append(True)
        if len(calls) == 2:
            raise RuntimeError("lease lost")

    with pytest.raises(RuntimeError, match="lease lost"):
        reclaim_store.merge_indexes(
            store,
            pacing=reclaim_store.Pacing(merge_pages=16),
            sleep=lambda _s: None,
            full=True,
            guard=guard,
        )
    assert len(_matches(store, "deploy")) == 160
    assert _automerge(store)["messages_fts"] == 4
    with store.read() as conn:
        fts_integrity_check(conn)


def test_a_traffic_merge_folds_small_segments_and_skips_merged_indexes(store: Store) -> None:
    fill_in_segments(store, sessions=60, started=NOW - DAY, ended=None, prefix="a")
    before = fts_segment_counts(store)
    assert min(before.values()) > 16
    expected = _matches(store, "deploy")
    merged = reclaim_store.merge_indexes(
        store, pacing=reclaim_store.Pacing(), sleep=lambda _s: None, full=False, above=16
    )
    after = fts_segment_counts(store)
    assert all(after[table] < before[table] and after[table] <= 16 for table in after)
    assert merged.steps >= 2
    assert _matches(store, "deploy") == expected
    again = reclaim_store.merge_indexes(
        store, pacing=reclaim_store.Pacing(), sleep=lambda _s: None, full=False, above=16
    )
    assert again.steps == 0 and fts_segment_counts(store) == after


def test_while_merging_is_held_a_prune_folds_what_piles_up(store: Store) -> None:
    fill_in_segments(store, sessions=20, started=NOW - 200 * DAY, ended=NOW - 100 * DAY, prefix="a")
    with reclaim_store.merging_held(store):
        assert _automerge(store) == {"messages_fts": 0, "messages_cjk": 0}
        # Every append leaves its segment (below 64 on a level, where crisismerge comes in).
        fill_in_segments(store, sessions=10, started=NOW - DAY, ended=None, prefix="b")
        assert min(fts_segment_counts(store).values()) > reclaim_store.FOLD_ABOVE
        done = reclaim_store.prune_in_batches(
            store,
            ended_before=NOW - 90 * DAY,
            pacing=reclaim_store.Pacing(batch_sessions=4),
            sleep=lambda _s: None,
            fold=True,
        )
        assert done == (20, 80)
        assert max(fts_segment_counts(store).values()) <= reclaim_store.FOLD_ABOVE
    assert _automerge(store) == {"messages_fts": 4, "messages_cjk": 4}
    assert len(_matches(store, "deploy")) == 40
    with store.read() as conn:
        fts_integrity_check(conn)
