"""Rows several writers may create at once, and migrations several processes may start at once.

SQLite has one writer at a time, so "look, then insert" is safe there; PostgreSQL runs writers
side by side and the second insert of a key fails on its unique index unless it is an upsert.
The `_interleaved` tests set the race up exactly (the second writer is seen waiting on the
first's lock before the first commits), so they fail every time without the fix; they need
two writers in flight, which SQLite's one write lock forbids: they run on PostgreSQL only.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text

from producers.intake import accept, checked, record
from shared.db import Connection, Store, TitleInUse, open_store
from shared.db.migrate import HEAD, current_revision
from shared.db.schema import inbox, routes
from shared.pipeline import leases, outbox
from shared.ports import RecordingWaker
from shared.settings import Settings
from shared.store import memory
from shared.store.sessions import create_session, get_session, set_title
from tests.pipeline_helpers import turn
from workers import flush

pytestmark = pytest.mark.both_databases

WAIT_SECONDS = 60.0


def postgres_only(store: Store) -> None:
    if store.dialect != "postgresql":
        pytest.skip("needs two writers in flight at once; SQLite's write lock admits one")


class Second:
    """A second writer in a thread of its own: `work(conn)` in one write transaction."""

    def __init__(self, store: Store, work: Callable[[Connection], Any]) -> None:
        self.pid: int | None = None
        self.result: Any = None
        self.error: BaseException | None = None
        self._store = store
        self._work = work
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._started.wait(WAIT_SECONDS)

    def _run(self) -> None:
        try:
            with self._store.write() as conn:
                self.pid = int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
                self._started.set()
                self.result = self._work(conn)
        except BaseException as error:
            self.error = error
        finally:
            self._started.set()

    def blocked_or_done(self, store: Store) -> bool:
        """Wait until the writer waits for another's lock (True) or has finished (False)."""
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline:
            if not self._thread.is_alive():
                return False
            with store.read() as conn:
                blockers = conn.execute(
                    text("SELECT cardinality(pg_blocking_pids(:pid))"), {"pid": self.pid}
                ).scalar_one()
            if blockers:
                return True
            time.sleep(0.01)
        raise AssertionError("the second writer neither finished nor waited for a lock")

    def join(self) -> Any:
        self._thread.join(WAIT_SECONDS)
        assert not self._thread.is_alive()
        if self.error is not None:
            raise self.error
        return self.result


# --- the arrival counter of a brand-new key ---


def test_parallel_first_turns_of_one_key_all_land_in_order(
    settings: Settings, store: Store
) -> None:
    start = threading.Barrier(10)

    def first(n: int) -> int:
        start.wait(WAIT_SECONDS)
        return accept(store, RecordingWaker(), turn(n), settings=settings, clock=time.time).seq

    with ThreadPoolExecutor(10) as pool:
        seqs = list(pool.map(first, range(10)))
    assert sorted(seqs) == list(range(1, 11))
    with store.read() as conn:
        assert conn.execute(select(routes.c.next_seq)).scalars().all() == [10]
        assert sorted(conn.execute(select(inbox.c.seq)).scalars()) == list(range(1, 11))


def test_a_first_turn_waiting_behind_another_counts_after_it_interleaved(
    settings: Settings, store: Store
) -> None:
    postgres_only(store)
    waker = RecordingWaker()
    with store.write() as conn:
        first = record(conn, checked(turn(1), settings), time.time())
        second = Second(store, lambda c: record(c, checked(turn(2), settings), time.time()))
        assert second.blocked_or_done(store)  # its insert waits for ours to commit
    recorded = second.join()
    assert (first.seq, recorded.seq) == (1, 2)
    assert not waker.drains
    with store.read() as conn:
        assert conn.execute(select(routes.c.next_seq)).scalar_one() == 2


def test_one_event_delivered_twice_at_once_is_recorded_once_interleaved(
    settings: Settings, store: Store
) -> None:
    postgres_only(store)
    accept(store, RecordingWaker(), turn(0), settings=settings, clock=time.time)  # the route
    with store.write() as conn:
        first = record(conn, checked(turn(1), settings), time.time())
        again = Second(store, lambda c: record(c, checked(turn(1), settings), time.time()))
        assert again.blocked_or_done(store)  # behind our arrival, past its look for the event
    redelivered = again.join()
    assert redelivered.duplicate and redelivered.turn_id == first.turn_id
    assert redelivered.seq == first.seq
    with store.read() as conn:
        assert conn.execute(select(inbox.c.seq)).scalars().all() == [1, 2]


# --- titles ---


def test_one_title_taken_by_two_sessions_at_once_is_title_in_use_interleaved(
    store: Store,
) -> None:
    postgres_only(store)
    with store.write() as conn:
        for sid in ("s1", "s2"):
            create_session(conn, session_id=sid, source="cli", now=1.0)
    with store.write() as conn:
        set_title(conn, "s1", "Shared plan")
        second = Second(store, lambda c: set_title(c, "s2", "Shared plan"))
        assert second.blocked_or_done(store)  # the unique index waits for our commit
    with pytest.raises(TitleInUse) as refused:
        second.join()
    assert refused.value.holder == "s1"
    with store.read() as conn:
        assert get_session(conn, "s2").title is None  # type: ignore[union-attr]


def test_a_new_session_with_a_title_taken_meanwhile_is_title_in_use_interleaved(
    store: Store,
) -> None:
    postgres_only(store)
    with store.write() as conn:
        create_session(conn, session_id="a", source="cli", now=1.0, title="Trip")
        second = Second(
            store, lambda c: create_session(c, session_id="b", source="cli", now=1.0, title="Trip")
        )
        assert second.blocked_or_done(store)
    with pytest.raises(TitleInUse):
        second.join()


# --- memory ---


def test_the_same_note_saved_by_two_turns_at_once_is_kept_once_interleaved(
    store: Store,
) -> None:
    postgres_only(store)
    owner = "telegram:42"
    with store.write() as conn:
        first = memory.save_note(conn, owner, "likes tea", now=1.0)
        second = Second(store, lambda c: memory.save_note(c, owner, "likes tea", now=2.0))
        # Without a lock the second finds no note (ours is not committed) and adds its own.
        assert second.blocked_or_done(store)
    assert second.join() == first
    with store.read() as conn:
        assert memory.count_notes(conn, owner) == 1


# --- chat lanes ---


def test_a_reply_committed_while_the_holder_lets_go_is_sent_interleaved(store: Store) -> None:
    """The holder looks for more and lets go in one write; a reply written meanwhile must be
    seen by that look or find the lane free (here the holder has looked, found nothing and
    let go, uncommitted, when the reply's writer tries the lane)."""
    postgres_only(store)
    lane = outbox.lane_for("telegram", "42")
    with store.write() as conn:
        first = outbox.add(conn, platform="telegram", chat_id="42", text="one", now=1.0)
        opened = flush.open_lane(conn, "holder", lane, 1.0)
    assert opened.lease is not None and [row.id for row in opened.rows] == [first.id]

    def reply(conn: Connection) -> tuple[outbox.OutboxRow, flush.Opened]:
        row = outbox.add(conn, platform="telegram", chat_id="42", text="two", now=2.0)
        return row, flush.open_lane(conn, "writer", lane, 2.0)

    lease = opened.lease
    with store.write() as conn:  # the holder's write after sending "one" (as _send_one's)
        leases.check_named(conn, lease, 2.0, flush.LANE_TTL)
        outbox.mark_sent(conn, first.id, "m1", 2.0)
        assert flush._pending_or_release(conn, lease) == []
        second = Second(store, reply)
        second.blocked_or_done(store)
    second_row, second_opened = second.join()
    # Left with the lane free and the reply pending, nobody would send it until a redrive.
    assert second_opened.lease is not None and second_opened.lease.holder == "writer"
    assert [row.id for row in second_opened.rows] == [second_row.id]


# --- migrations ---

OPENER = """
import os, sys, time
from shared.db import open_store
from shared.settings import load_settings
url = load_settings(dict(os.environ)).resolved_database_url
go = sys.argv[1]
print("ready", flush=True)
while not os.path.exists(go):
    time.sleep(0.005)
open_store(url).close()
"""


def test_four_processes_opening_an_empty_database_at_once_make_one_schema(
    hermes_env: dict[str, str], settings: Settings, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPENER, str(go)],
            env=hermes_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).parents[2],
        )
        for _ in range(4)
    ]
    for proc in procs:  # every one has imported everything and waits at the start line
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
    go.touch()
    outcomes = [proc.communicate(timeout=120) for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * 4, [err for _, err in outcomes]
    store = open_store(settings.resolved_database_url)
    try:
        with store.read() as conn:
            assert current_revision(conn)[0] == HEAD
    finally:
        store.close()
