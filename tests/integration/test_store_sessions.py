"""Session rows on a real state.db: titles, provenance, lineage, resolving arguments, counters."""

from __future__ import annotations

import pytest
from alembic import command
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from sqlalchemy import Connection, text, update

from shared.db import SessionNotFound, Store, TitleInUse, open_store
from shared.db.engine import connect
from shared.db.migrate import alembic_config
from shared.db.schema import sessions
from shared.search import SearchRequest, search
from shared.settings import Settings
from shared.store import messages as message_rows
from shared.store import session_listing
from shared.store import sessions as session_rows
from shared.titles import MAX_TITLE_CHARS, TitleError, TitleSource
from tests.integration.storekit import (
    counter_drift,
    fts_ids,
    fts_integrity_check,
    new,
    title_of,
)

pytestmark = pytest.mark.both_databases

# --- creating, titling ---


def test_create_and_read_back(store: Store) -> None:
    with store.write() as conn:
        record = session_rows.create_session(
            conn,
            session_id="20240101_000000_abcdef",
            source="telegram",
            now=42.0,
            user_id="u1",
            chat_id="c1",
        )
    assert record.started_at == record.last_active_at == 42.0
    assert record.message_count == 0
    with store.read() as conn:
        assert session_rows.get_session(conn, record.id) == record
        assert session_rows.get_session(conn, "nope") is None
        with pytest.raises(SessionNotFound):
            session_rows.require_session(conn, "nope")


def test_title_is_cleaned_on_the_way_in(store: Store) -> None:
    with store.write() as conn:
        new(conn, "a", title="  my\u200b  project\u202e\n")
        new(conn, "b")
        session_rows.set_title(conn, "b", "東京\t🎉\x07 notes")
    assert title_of(store, "a") == ("my project", "user")
    assert title_of(store, "b") == ("東京 🎉 notes", "user")


@pytest.mark.parametrize("bad", ["x" * (MAX_TITLE_CHARS + 1), "\u200b\u200d", "   "])
def test_invalid_title_changes_nothing(store: Store, bad: str) -> None:
    with store.write() as conn:
        new(conn, "a", title="kept")
    with pytest.raises(TitleError), store.write() as conn:
        session_rows.set_title(conn, "a", bad)
    with pytest.raises(TitleError), store.write() as conn:
        new(conn, "b", title=bad)
    assert title_of(store, "a") == ("kept", "user")
    with store.read() as conn:
        assert session_rows.get_session(conn, "b") is None


def test_title_of_exactly_the_limit_is_fine(store: Store) -> None:
    title = "t" * MAX_TITLE_CHARS
    with store.write() as conn:
        new(conn, "a", title=title + "\u200b\u200b")
    assert title_of(store, "a")[0] == title


def test_duplicate_title_names_the_holder(store: Store) -> None:
    with store.write() as conn:
        new(conn, "20240101_000000_aaaaaa", title="Launch plan")
        new(conn, "20240101_000001_bbbbbb")
    with pytest.raises(TitleInUse, match="20240101_000000_aaaaaa") as caught, store.write() as conn:
        session_rows.set_title(conn, "20240101_000001_bbbbbb", "Launch\u200b plan")
    assert caught.value.holder == "20240101_000000_aaaaaa"
    with pytest.raises(TitleInUse, match="20240101_000000_aaaaaa"), store.write() as conn:
        new(conn, "20240101_000002_cccccc", title="Launch plan")
    assert title_of(store, "20240101_000001_bbbbbb") == (None, None)


def test_retitling_a_session_with_its_own_title_is_fine(store: Store) -> None:
    with store.write() as conn:
        new(conn, "a", title="same")
        assert session_rows.set_title(conn, "a", "same")
    assert title_of(store, "a") == ("same", "user")


def test_untitled_sessions_do_not_collide(store: Store) -> None:
    with store.write() as conn:
        for i in range(5):
            new(conn, f"s{i}")
        session_rows.set_title(conn, "s0", "x")
        session_rows.set_title(conn, "s0", None)
        session_rows.set_title(conn, "s1", "x")
    assert title_of(store, "s0") == (None, None)
    assert title_of(store, "s1") == ("x", "user")


def test_a_freed_title_can_be_taken(store: Store) -> None:
    with store.write() as conn:
        new(conn, "a", title="x")
        session_rows.delete_session(conn, "a")
        new(conn, "b", title="x")
    assert title_of(store, "b") == ("x", "user")


# --- provenance: derived < auto < user ---


def test_auto_title_never_overwrites_a_user_title(store: Store) -> None:
    with store.write() as conn:
        new(conn, "a", title="Mine")
        assert not session_rows.set_title(conn, "a", "Model's idea", TitleSource.AUTO)
        assert not session_rows.set_title(conn, "a", "Inherited #2", TitleSource.DERIVED)
        assert not session_rows.set_title(conn, "a", None, TitleSource.AUTO)
    assert title_of(store, "a") == ("Mine", "user")


def test_derived_title_never_overwrites_an_auto_title(store: Store) -> None:
    with store.write() as conn:
        new(conn, "a", title="Auto", title_source=TitleSource.AUTO)
        assert not session_rows.set_title(conn, "a", "Derived", TitleSource.DERIVED)
    assert title_of(store, "a") == ("Auto", "auto")


def test_higher_or_equal_rank_overwrites(store: Store) -> None:
    with store.write() as conn:
        new(conn, "a", title="first", title_source=TitleSource.DERIVED)
        assert session_rows.set_title(conn, "a", "second", TitleSource.DERIVED)
        assert session_rows.set_title(conn, "a", "third", TitleSource.AUTO)
        assert session_rows.set_title(conn, "a", "fourth", TitleSource.AUTO)
        assert session_rows.set_title(conn, "a", "fifth", TitleSource.USER)
        assert session_rows.set_title(conn, "a", "sixth", TitleSource.USER)
    assert title_of(store, "a") == ("sixth", "user")


def test_auto_title_fills_an_untitled_session(store: Store) -> None:
    with store.write() as conn:
        new(conn, "a")
        assert session_rows.set_title(conn, "a", "Quarterly numbers", TitleSource.AUTO)
    assert title_of(store, "a") == ("Quarterly numbers", "auto")


def test_auto_title_may_follow_a_cleared_user_title(store: Store) -> None:
    with store.write() as conn:
        new(conn, "a", title="Mine")
        assert session_rows.set_title(conn, "a", None, TitleSource.USER)
        assert session_rows.set_title(conn, "a", "Auto", TitleSource.AUTO)
    assert title_of(store, "a") == ("Auto", "auto")


# --- ending, deleting, listing ---


def test_first_end_wins(store: Store) -> None:
    with store.write() as conn:
        new(conn, "a")
        assert session_rows.end_session(conn, "a", "user_exit", 10.0)
        assert not session_rows.end_session(conn, "a", "idle", 20.0)
        record = session_rows.require_session(conn, "a")
    assert (record.ended_at, record.end_reason) == (10.0, "user_exit")


def test_delete_cascades_and_unparents_continuations(store: Store) -> None:
    with store.write() as conn:
        new(conn, "parent", title="p")
        new(conn, "child", parent_session_id="parent")
        message_rows.append_message(conn, "parent", "user", "kumquat", now=2.0)
        message_rows.append_message(conn, "child", "user", "persimmon", now=3.0)
        assert session_rows.delete_session(conn, "parent")
        assert not session_rows.delete_session(conn, "parent")
    with store.read() as conn:
        assert session_rows.get_session(conn, "parent") is None
        child = session_rows.require_session(conn, "child")
        assert child.parent_session_id is None
        assert message_rows.transcript(conn, "parent") == []
        assert [m.content for m in message_rows.transcript(conn, "child")] == ["persimmon"]
        if store.dialect == "sqlite":  # the FTS5 index itself holds no row of it
            assert fts_ids(conn, "kumquat") == set()
        assert counter_drift(conn) == []
    assert search(store, SearchRequest(query="kumquat"))["count"] == 0
    assert search(store, SearchRequest(query="persimmon"))["count"] == 1


def test_append_to_a_missing_session_changes_nothing(store: Store) -> None:
    with pytest.raises(SessionNotFound), store.write() as conn:
        message_rows.append_message(conn, "ghost", "user", "boo", now=1.0)
    with store.read() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM messages")).scalar() == 0


def test_append_bumps_activity_and_tokens(store: Store) -> None:
    with store.write() as conn:
        new(conn, "a", now=5.0)
        message_rows.append_message(conn, "a", "user", "hi", now=7.0, input_tokens=3)
        message_rows.append_message(conn, "a", "assistant", "yo", now=6.0, output_tokens=4)
        record = session_rows.require_session(conn, "a")
    assert record.last_active_at == 7.0  # never moves backwards
    assert (record.input_tokens, record.output_tokens, record.message_count) == (3, 4, 2)


def test_listing_by_activity_with_source_filter_and_limit(store: Store) -> None:
    with store.write() as conn:
        for i, source in enumerate(["cli", "telegram", "cli", "slack", "cli"]):
            new(conn, f"s{i}", now=float(i), source=source)
        message_rows.append_message(conn, "s0", "user", "  wake\n me   up  ", now=100.0)
        rows, more = session_listing.list_sessions(conn, limit=3)
        assert [r.record.id for r in rows] == ["s0", "s4", "s3"]
        assert more
        assert rows[0].preview == "wake me up"
        rows, more = session_listing.list_sessions(conn, source="cli", limit=10)
        assert [r.record.id for r in rows] == ["s0", "s4", "s2"]
        assert not more


def test_deep_pages_walk_every_session_once_in_activity_order(store: Store) -> None:
    """Pages at any offset, ties on last activity included, are the slices of the full order
    (the page is picked on the narrow columns and its rows read after)."""
    with store.write() as conn:
        for i in range(60):
            new(conn, f"s{i:02d}", now=float(i // 4), source="cli" if i % 3 else "slack")
    for source in (None, "cli", "slack"):
        with store.read() as conn:
            whole = session_listing.list_sessions(conn, source=source, limit=1000)[0]
            expected = [r.record.id for r in whole]
            assert len(expected) == {None: 60, "cli": 40, "slack": 20}[source]
            assert expected == [
                r.record.id
                for r in sorted(whole, key=lambda r: (r.record.last_active_at, r.record.id))[::-1]
            ]
            walked: list[str] = []
            for offset in range(0, len(expected) + 7, 7):
                rows, more = session_listing.list_sessions(
                    conn, source=source, limit=7, offset=offset
                )
                walked += [r.record.id for r in rows]
                assert more == (offset + 7 < len(expected))
        assert walked == expected


# --- counters stay exact ---

SOURCES = ["cli", "telegram", "slack"]
OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "create",
                "append",
                "append",
                "append",
                "delete_message",
                "delete_session",
                "delete_many",
                "change_source",
                "end",
                "append_null",
            ]
        ),
        st.integers(min_value=0, max_value=10_000),
        st.integers(min_value=0, max_value=10_000),
    ),
    max_size=60,
)


_run = iter(range(10**9))
_made = iter(range(10**9))  # session ids never reused: a deleted one's name stays taken


def apply(conn: Connection, op: str, a: int, b: int, live: list[str], run: int) -> None:
    if op == "create" or not live:
        sid = f"r{run}_{next(_made)}_{a}"
        new(conn, sid, source=SOURCES[a % 3])
        live.append(sid)
        return
    sid = live[a % len(live)]
    if op in {"append", "append_null"}:
        content = None if op == "append_null" else f"word{b % 7}"
        message_rows.append_message(conn, sid, ["user", "assistant", "tool"][b % 3], content, now=1)
    elif op == "delete_message":
        mid = conn.execute(
            text("SELECT id FROM messages WHERE session_id = :s ORDER BY id LIMIT 1 OFFSET :o"),
            {"s": sid, "o": b % 3},
        ).scalar()
        if mid is not None:
            conn.execute(text("DELETE FROM messages WHERE id = :id"), {"id": mid})
    elif op == "delete_session":
        session_rows.delete_session(conn, sid)
        live.remove(sid)
    elif op == "delete_many":
        doomed = live[a % len(live) :: 2]
        session_rows.delete_sessions(conn, doomed)
        live[:] = [s for s in live if s not in doomed]
    elif op == "change_source":
        conn.execute(
            update(sessions)
            .where(sessions.c.id == sid)
            .values(source=SOURCES[b % 3] + "x" * (b % 2))
        )
    elif op == "end":
        session_rows.end_session(conn, sid, "idle", now=2.0)


@hypothesis_settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=OPERATIONS, per_transaction=st.integers(min_value=1, max_value=8))
def test_counters_match_count_star(
    store: Store, operations: list[tuple[str, int, int]], per_transaction: int
) -> None:
    # The store is shared by every example: the invariants are global, so they must hold
    # over whatever earlier examples left behind too.
    run = next(_run)
    live: list[str] = []
    for start in range(0, len(operations), per_transaction):
        with store.write() as conn:
            for op, a, b in operations[start : start + per_transaction]:
                apply(conn, op, a, b, live, run)
    with store.read() as conn:
        assert counter_drift(conn) == []
        summary = session_listing.stats(conn)
        assert summary.sessions == conn.execute(text("SELECT COUNT(*) FROM sessions")).scalar()
        assert summary.messages == conn.execute(text("SELECT COUNT(*) FROM messages")).scalar()
        negative = conn.execute(
            text("SELECT COUNT(*) FROM source_stats WHERE sessions < 0 OR messages < 0")
        ).scalar()
        assert negative == 0
        fts_integrity_check(conn)


def test_counters_survive_a_rolled_back_transaction(store: Store) -> None:
    with store.write() as conn:
        new(conn, "a")
        message_rows.append_message(conn, "a", "user", "x", now=1.0)
    with pytest.raises(RuntimeError), store.write() as conn:
        message_rows.append_message(conn, "a", "user", "y", now=2.0)
        session_rows.delete_session(conn, "a")
        raise RuntimeError("abort")
    with store.read() as conn:
        assert counter_drift(conn) == []
        assert session_rows.require_session(conn, "a").message_count == 1
        assert session_listing.stats(conn).messages == 1


def test_stats_by_source(store: Store) -> None:
    with store.write() as conn:
        new(conn, "a", source="cli")
        new(conn, "b", source="telegram")
        new(conn, "c", source="telegram")
        for sid, count in [("a", 2), ("b", 1), ("c", 3)]:
            for _ in range(count):
                message_rows.append_message(conn, sid, "user", "m", now=1.0)
        session_rows.delete_session(conn, "a")
        summary = session_listing.stats(conn)
    assert (summary.sessions, summary.messages) == (2, 4)
    assert summary.by_source == [("telegram", 2, 4)]  # a source with no sessions is not listed
    with store.read() as conn:
        fts_integrity_check(conn)


def test_stats_never_reads_the_sessions_rows(store: Store) -> None:
    """SQLite reads its per-source counters; PostgreSQL, which keeps none, sums from the
    activity index that carries message_count (0021), never from the rows (system prompts and
    all: 0.9 s at 20,000 sessions before)."""
    with store.write() as conn:
        for sid, source in [("a", "cli"), ("b", "telegram")]:
            new(conn, sid, source=source)
            message_rows.append_message(conn, sid, "user", "m", now=1.0)
    with store.read() as conn:
        query = session_listing.stats_query(conn).compile(
            conn, compile_kwargs={"literal_binds": True}
        )
        if conn.dialect.name == "sqlite":
            found = " | ".join(
                str(row[-1]) for row in conn.execute(text(f"EXPLAIN QUERY PLAN {query}"))
            )
            assert "source_stats" in found
            assert "sessions" not in found.replace("source_stats", "")
        else:
            conn.execute(text("SET LOCAL enable_seqscan = off"))
            found = " | ".join(str(row[0]) for row in conn.execute(text(f"EXPLAIN {query}")))
            assert "Index Only Scan using ix_sessions_source_last_active" in found
        assert session_listing.stats(conn).by_source == [("cli", 1, 1), ("telegram", 1, 1)]


def test_an_older_store_is_counted_by_the_upgrade_and_kept_after(settings: Settings) -> None:
    """Until revision 0011 nothing kept `message_count` on PostgreSQL (every session read 0
    messages); the upgrade counts what is there, and appends after it keep counting."""
    url = settings.resolved_database_url
    older = connect(url)
    try:
        with older.write() as conn:
            command.upgrade(alembic_config(conn), "0010")
            for sid, count in [("a", 3), ("b", 1), ("c", 0)]:
                new(conn, sid, source="telegram" if sid == "b" else "cli")
                for i in range(count):
                    message_rows.append_message(conn, sid, "user", f"m{i}", now=2.0)
    finally:
        older.close()
    store = open_store(url)
    try:
        with store.write() as conn:
            message_rows.append_message(conn, "c", "user", "after", now=3.0)
        with store.read() as conn:
            counts = {sid: session_rows.require_session(conn, sid).message_count for sid in "abc"}
            assert counter_drift(conn) == []
            summary = session_listing.stats(conn)
    finally:
        store.close()
    assert counts == {"a": 3, "b": 1, "c": 1}
    assert summary.by_source == [("cli", 2, 4), ("telegram", 1, 1)]


@pytest.mark.parametrize("count", [1, 2, 8, 11])
def test_a_turns_rows_are_appended_in_order_with_their_values(store: Store, count: int) -> None:
    """append_messages puts up to 8 rows in one INSERT: ids still follow the rows' order, each
    row keeps its own values, and the trigger-kept counters count every row."""
    rows = [
        message_rows.NewRow(
            "tool" if i % 3 == 2 else ("user" if i % 2 == 0 else "assistant"),
            None if i == 1 else f"row {i}",
            10.0 + i,
            tool_calls=[{"id": f"c{i}"}] if i % 3 == 1 else None,
            tool_call_id=f"c{i}" if i % 3 == 2 else None,
            tool_name="read" if i % 3 == 2 else None,
            token_count=i * 1000 if i % 2 else None,
            platform_message_id=f"m{i}" if i == 0 else None,
        )
        for i in range(count)
    ]
    with store.write() as conn:
        new(conn, "a", now=1.0)
        new(conn, "b", now=1.0)
        message_rows.append_message(conn, "b", "user", "between", now=2.0)
        message_rows.append_messages(conn, "a", rows, input_tokens=5, output_tokens=7)
    with store.read() as conn:
        stored = message_rows.transcript(conn, "a")
        record = session_rows.get_session(conn, "a")
        assert counter_drift(conn) == []
    assert [m.id for m in stored] == sorted(m.id for m in stored)
    assert [
        (m.role, m.content, m.timestamp, m.tool_call_id, m.tool_name, m.token_count) for m in stored
    ] == [
        (r.role, r.content, r.timestamp, r.tool_call_id, r.tool_name, r.token_count) for r in rows
    ]
    assert [m.platform_message_id for m in stored][:1] == ["m0"]
    assert record is not None and record.message_count == count
    assert (record.input_tokens, record.output_tokens) == (5, 7)
    assert record.last_active_at == 10.0 + count - 1
