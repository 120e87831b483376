"""The statements a key's first exchange merges on PostgreSQL behave as the ones they replace
(both databases: SQLite runs a statement per step): a new session made and attached to its
route in one statement, and the first exchange's auto-title (the look, the look for another
holder and the write in one). The rest of a turn's claim and outcome: test_pg_turn_merges."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from producers.intake import accept
from shared.db import Connection, Store
from shared.db.schema import routes as routes_table
from shared.db.schema import sessions as sessions_table
from shared.model import SessionRecord
from shared.pipeline import inbox, route_sessions
from shared.session_key import SessionKey
from shared.settings import Settings
from shared.store.sessions import create_attached, create_session, require_session, set_title
from shared.titles import TitleSource
from tests.integration.storekit import pg_round_trips, pg_store_round_trips
from tests.pipeline_helpers import ScriptedAgent, make_runtime, turn
from workers import drain_claim
from workers.agent import compression
from workers.agent.base import AgentRequest
from workers.agent.titles import write_auto_title
from workers.drain import drain

pytestmark = pytest.mark.both_databases


def _titles(conn: Connection) -> dict[str, tuple[str | None, str | None]]:
    rows = conn.execute(
        select(sessions_table.c.id, sessions_table.c.title, sessions_table.c.title_source)
    )
    return {row.id: (row.title, row.title_source) for row in rows}


def test_an_auto_title_is_written_as_set_title_writes_it_in_fewer_round_trips(
    store: Store, tmp_path: Path
) -> None:
    """The first exchange's title: written as `set_title` writes it (AUTO) when the session has
    none and the title is free (3 round trips on PostgreSQL: the look, the look for a holder
    and the write in one statement, in its savepoint); nothing for a titled or missing session;
    a taken title still takes its distinct form."""
    with store.write() as conn:
        for n, name in enumerate(("a", "b", "c")):
            create_session(conn, session_id=name, source="cli", now=1 + n)
        set_title(conn, "b", "Mine", TitleSource.USER)
    with store.write() as conn:
        if store.dialect != "postgresql":
            written = write_auto_title(conn, "a", "Zebra notes")
        else:
            with pg_round_trips(conn, tmp_path) as trips:
                written = write_auto_title(conn, "a", "Zebra notes")
            assert trips == [3]
        assert written == "Zebra notes"
        assert write_auto_title(conn, "b", "Other notes") is None  # titled already
        assert write_auto_title(conn, "gone", "Gone notes") is None
        assert write_auto_title(conn, "c", "Zebra notes") == "Zebra notes (2)"
    with store.read() as conn:
        assert _titles(conn) == {
            "a": ("Zebra notes", TitleSource.AUTO.label),
            "b": ("Mine", TitleSource.USER.label),
            "c": ("Zebra notes (2)", TitleSource.AUTO.label),
        }


def test_an_auto_title_taken_meanwhile_by_another_transaction_takes_its_distinct_form(
    store: Store,
) -> None:
    """Another transaction gives the title to another session after our look: its unique index
    refuses ours once that commits; the savepoint keeps our transaction, and the general path
    writes the distinct form (PostgreSQL: SQLite has one writer, nothing can come between)."""
    if store.dialect != "postgresql":
        pytest.skip("one writer at a time on SQLite")
    with store.write() as conn:
        create_session(conn, session_id="a", source="cli", now=1)
        create_session(conn, session_id="b", source="cli", now=2)
    taking = threading.Event()

    def other() -> None:
        with store.write() as conn:
            set_title(conn, "a", "Zebra notes", TitleSource.USER)
            taking.set()
            time.sleep(0.5)  # ours looks now, finds it free, and waits on the index

    thread = threading.Thread(target=other)
    thread.start()
    assert taking.wait(10)
    with store.write() as conn:
        written = write_auto_title(conn, "b", "Zebra notes")
        create_session(conn, session_id="c", source="cli", now=3)  # the transaction goes on
    thread.join()
    assert written == "Zebra notes (2)"
    with store.read() as conn:
        titles = _titles(conn)
    assert (titles["a"][0], titles["b"][0], titles["c"][0]) == (
        "Zebra notes",
        "Zebra notes (2)",
        None,
    )


def test_a_sessions_first_turn_is_given_the_session_it_made_as_stored(
    settings: Settings, store: Store, tmp_path: Path
) -> None:
    """The claim that makes the key's session gives the model the record it inserted, not a
    read of it: the same as the stored row, counters at their start. On PostgreSQL the claim is
    7 round trips: the lease taken with the turn found, one statement sent alone, which cannot
    claim a turn with no live session; then BEGIN, the fence, the next turn with its route, the
    session made and attached, running with the history, COMMIT (a look for a free id, the
    insert, the attach and a read of the session made 9). The first turn's drain is 21 with this
    test's own read (3) and the outcome with its delivery (11; the delivery is one statement
    sent alone)."""
    seen: list[tuple[SessionRecord, SessionRecord]] = []

    def reply(request: AgentRequest) -> str:
        with store.read() as conn:
            seen.append((request.session, require_session(conn, request.session.id)))
        return f"reply to {request.turn.text}"

    rt, _ = make_runtime(settings, store, ScriptedAgent(reply=reply))
    key = accept(store, rt.waker, turn(0), settings=settings, clock=time.time).session_key
    if store.dialect != "postgresql":
        assert drain(rt, key).ran == 1
    else:
        with pg_store_round_trips(store, tmp_path) as trips:
            assert drain(rt, key).ran == 1
        assert trips == [21]
    ((given, stored),) = seen
    assert given == stored and given.message_count == 0


def _session_and_route(conn: Connection, key: str) -> tuple[dict[str, object], str | None]:
    """The session a route points at (its columns but id and times) and that id."""
    session_id = conn.execute(
        select(routes_table.c.session_id).where(routes_table.c.session_key == key)
    ).scalar_one()
    row = conn.execute(select(sessions_table).where(sessions_table.c.id == session_id)).one()
    kept = {
        k: v for k, v in row._mapping.items() if k not in ("id", "started_at", "last_active_at")
    }
    return kept, session_id


def test_a_new_session_is_made_and_attached_as_create_session_and_attach_do(
    store: Store, tmp_path: Path
) -> None:
    """PostgreSQL: `create_attached` writes the session `create_session` writes and points the
    route at it as `attach` does, in one round trip; a taken id writes nothing."""
    if store.dialect != "postgresql":
        pytest.skip("create_attached is PostgreSQL's (SQLite runs create_session and attach)")
    columns: dict[str, Any] = {"user_id": "u1", "chat_id": "c1", "chat_type": "dm", "model": "m"}
    with store.write() as conn:
        for n, key in enumerate(("k1", "k2")):
            inbox.record_turn(conn, turn(n, chat=key), SessionKey(key, shared=False), now=1)
    with store.write() as conn:
        create_session(conn, session_id="s1", source="cli", now=2, session_key="k1", **columns)
        route_sessions.attach(conn, "k1", "s1", 2)
    with store.write() as conn, pg_round_trips(conn, tmp_path) as trips:
        made = create_attached(
            conn, session_id="s2", source="cli", now=2, key="k2", session_key="k2", **columns
        )
    assert trips == [1]
    with store.write() as conn:
        taken = create_attached(
            conn, session_id="s1", source="cli", now=3, key="k2", session_key="k2", **columns
        )
    with store.read() as conn:
        one, one_id = _session_and_route(conn, "k1")
        two, two_id = _session_and_route(conn, "k2")
        assert made == require_session(conn, "s2")
        count = conn.execute(select(func.count()).select_from(sessions_table)).scalar_one()
    assert (one_id, two_id, taken, count) == ("s1", "s2", None, 2)
    assert {**one, "session_key": "k2"} == two


def test_a_new_sessions_id_passes_over_one_taken(
    settings: Settings, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim of a key's first turn makes its session under an id nobody holds (a taken one
    is passed over, as free_session_id passes over it) and points the route at it."""
    ids = iter(["20260101_000000_taken1", "20260101_000000_fresh1"])
    for module in (drain_claim, compression):
        monkeypatch.setattr(module, "new_session_id", lambda *_a, **_k: next(ids))
    with store.write() as conn:
        create_session(conn, session_id="20260101_000000_taken1", source="cli", now=1)
    rt, _ = make_runtime(settings, store)
    key = accept(store, rt.waker, turn(0), settings=settings, clock=time.time).session_key
    assert drain(rt, key).ran == 1
    with store.read() as conn:
        made, session_id = _session_and_route(conn, key)
        taken = require_session(conn, "20260101_000000_taken1")
    assert session_id == "20260101_000000_fresh1"
    assert (made["session_key"], made["message_count"], taken.message_count) == (key, 2, 0)
