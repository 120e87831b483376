"""Pipeline guarantees not pinned elsewhere: lease renewal, racing first messages, status, redrive.

Real state.db files and the store's own functions; the agent is the scripted twin.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from sqlalchemy import select, text

from producers.cli.app import App
from producers.cli.main import cli
from producers.intake import Accepted, accept
from shared.db import Store, open_store
from shared.db.schema import inbox as inbox_table
from shared.pipeline import inbox, routes
from shared.settings import Settings, load_settings
from tests.pipeline_helpers import ScriptedAgent, make_runtime, transcript_of, turn
from workers.agent.base import AgentRequest
from workers.drain import drain
from workers.redrive import redrive

pytestmark = pytest.mark.both_databases


@pytest.fixture
def short_lease(hermes_env: dict[str, str]) -> Settings:
    return load_settings(
        {
            **hermes_env,
            "HERMES_PIPELINE__LEASE_SECONDS": "2",  # renewed every ~0.7 s: slack for a busy CI box
            "HERMES_PIPELINE__RETRY_BACKOFF_SECONDS": "0",
        }
    )


@pytest.fixture
def second_store(settings: Settings, store: Store) -> Iterator[Store]:
    """Another Store on the same file, as another worker process would open it."""
    opened = open_store(settings.resolved_database_url)
    yield opened
    opened.close()


class WriteLockBusy(Exception):
    """Someone held the tables a turn writes for longer than the test waited."""


def _take_write_lock(settings: Settings, timeout: float) -> None:
    """Lock what a turn writes, on a fresh connection: raises WriteLockBusy if someone holds it
    too long. SQLite: BEGIN IMMEDIATE; PostgreSQL: the turn's tables in EXCLUSIVE mode (which
    any open transaction that wrote them holds off)."""
    if settings.state_db_path is None:
        import psycopg

        with psycopg.connect(settings.resolved_database_url, autocommit=True) as pg:
            pg.execute(f"SET lock_timeout = '{int(timeout * 1000)}ms'")
            try:
                with pg.transaction():
                    pg.execute("LOCK TABLE routes, inbox, sessions, messages IN EXCLUSIVE MODE")
            except psycopg.errors.LockNotAvailable as error:
                raise WriteLockBusy(str(error)) from error
        return
    conn = sqlite3.connect(settings.state_db_path, timeout=timeout, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
    except sqlite3.OperationalError as error:
        raise WriteLockBusy(str(error)) from error
    finally:
        conn.close()


# --- lease renewal while the model thinks ---


def test_a_long_turn_keeps_its_lease_and_holds_no_transaction(
    short_lease: Settings, store: Store, second_store: Store
) -> None:
    """The agent takes 3x the lease: the renewer keeps it, so a second worker finds it busy."""
    started = threading.Event()
    lock_taken: list[bool] = []

    def slow_reply(request: AgentRequest) -> str:
        started.set()
        try:  # no transaction is open while the model thinks: others can write
            _take_write_lock(short_lease, timeout=1.0)
            lock_taken.append(True)
        except WriteLockBusy:
            lock_taken.append(False)
        time.sleep(3 * short_lease.pipeline.lease_seconds)
        return f"slow reply to {request.turn.text}"

    agent = ScriptedAgent(reply=slow_reply)
    rt, _ = make_runtime(short_lease, store, agent)
    other_agent = ScriptedAgent()
    rt2, _ = make_runtime(short_lease, second_store, other_agent)
    key = accept(store, rt.waker, turn(0), settings=short_lease, clock=time.time).session_key
    results: list[object] = []
    worker = threading.Thread(target=lambda: results.append(drain(rt, key)))
    try:
        worker.start()
        assert started.wait(10)
        busy = []
        for _ in range(2):  # both past the first expiry: only renewal keeps the lease
            time.sleep(1.2 * short_lease.pipeline.lease_seconds)
            busy.append(drain(rt2, key).reason)
        assert busy == ["busy", "busy"]
        _take_write_lock(short_lease, timeout=1.0)  # from the test thread too, mid-turn
        worker.join(20)
        assert not worker.is_alive()
    finally:
        rt.renewer.close()
        rt2.renewer.close()
    assert [(r.ran, r.reason) for r in results] == [(1, "idle")]  # type: ignore[attr-defined]
    assert lock_taken == [True]
    assert agent.calls == ["message 0"] and other_agent.calls == []
    assert transcript_of(store, key) == [
        ("user", "message 0"),
        ("assistant", "slow reply to message 0"),
    ]
    with store.read() as conn:
        row = conn.execute(select(inbox_table.c.status, inbox_table.c.attempts)).one()
    assert tuple(row) == ("done", 1)
    assert drain(rt2, key).reason == "idle"  # nothing left, nothing run twice


# --- single-flight routing of a new key's first messages ---

RACERS = 8


def test_first_messages_racing_from_many_stores_make_one_gap_free_line(
    settings: Settings, store: Store
) -> None:
    stores = [open_store(settings.resolved_database_url) for _ in range(RACERS)]
    barrier = threading.Barrier(RACERS)
    accepted: list[Accepted] = []
    errors: list[BaseException] = []
    rt, _ = make_runtime(settings, store, ScriptedAgent())

    def race(n: int) -> None:
        try:
            barrier.wait(10)
            accepted.append(
                accept(stores[n], rt.waker, turn(n), settings=settings, clock=time.time)
            )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=race, args=(n,)) for n in range(RACERS)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    finally:
        for opened in stores:
            opened.close()
    assert errors == []
    assert len(accepted) == RACERS and not any(a.duplicate for a in accepted)
    (key,) = {a.session_key for a in accepted}
    assert sorted(a.seq for a in accepted) == list(range(1, RACERS + 1))
    with store.read() as conn:
        assert conn.execute(text("SELECT count(*) FROM routes")).scalar_one() == 1
        rows = conn.execute(
            select(inbox_table.c.seq, inbox_table.c.text).order_by(inbox_table.c.seq)
        ).all()
    assert [r.seq for r in rows] == list(range(1, RACERS + 1))
    in_order = [r.text for r in rows]
    try:
        assert drain(rt, key).ran == RACERS
    finally:
        rt.renewer.close()
    with store.read() as conn:
        assert conn.execute(text("SELECT count(*) FROM sessions")).scalar_one() == 1
    said = [content for role, content in transcript_of(store, key) if role == "user"]
    assert said == in_order
    assert sorted(said) == sorted(f"message {n}" for n in range(RACERS))


# --- hermes status with real values ---


def _record(store: Store, settings: Settings, chat: str, n: int, at: float) -> inbox.Recorded:
    from producers.intake import key_for

    item = turn(n, chat)
    with store.write() as conn:
        return inbox.record_turn(conn, item, key_for(item, settings), now=at)


def test_status_json_reports_the_inbox(settings: Settings, store: Store) -> None:
    now = time.time()
    _record(store, settings, "old", 0, now - 600)  # the oldest waiting turn
    _record(store, settings, "old", 1, now - 30)
    held = _record(store, settings, "busy", 0, now - 100)
    dead = _record(store, settings, "sad", 0, now - 50)
    stale = _record(store, settings, "gone", 0, now - 2000)
    with store.write() as conn:
        assert routes.acquire_route(conn, held.session_key, "worker-a", now, 600) is not None
        expired = routes.acquire_route(conn, stale.session_key, "worker-b", now - 1000, 10)
        assert expired is not None  # held once, long expired: not counted
        inbox.finish_turn(conn, stale.turn_id, inbox.DONE, now - 990)
        inbox.finish_turn(conn, dead.turn_id, inbox.DEAD, now - 40, error="model exploded")

    report = _status_json(settings)
    assert report["waiting_turns"] == 3
    assert report["running_turns"] == 0
    assert 600 <= report["oldest_waiting_seconds"] < 600 + 300
    assert report["leases_held"] == 1
    assert report["dead_turns"] == 1
    assert report["broker_reachable"] is False and report["workers"] == []


def _status_json(settings: Settings) -> dict[str, object]:
    """`hermes status --json`, run through click against `settings`."""
    app = App(settings_loader=lambda: settings)
    try:
        result = CliRunner().invoke(cli, ["status", "--json"], obj=app)
    finally:
        app.close()
    assert result.exit_code == 0, result.output
    report: dict[str, object] = json.loads(result.output)
    return report


def test_status_json_on_an_empty_inbox(settings: Settings, store: Store) -> None:
    report = _status_json(settings)
    assert (report["waiting_turns"], report["oldest_waiting_seconds"]) == (0, None)
    assert (report["leases_held"], report["dead_turns"]) == (0, 0)


# --- the redrive sweep reports each dead turn once ---


def _dead_reports(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "workers.redrive" and r.getMessage().startswith("dead turn ")
    ]


def test_redrive_reports_a_dead_turn_once(
    settings: Settings, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    rt, _ = make_runtime(settings, store)
    first = _record(store, settings, "sad", 0, time.time())
    with store.write() as conn:
        inbox.finish_turn(conn, first.turn_id, inbox.DEAD, time.time(), error="boom")
    caplog.set_level(logging.ERROR, logger="workers.redrive")

    assert redrive(rt).dead == 1
    reports = _dead_reports(caplog)
    assert len(reports) == 1 and reports[0].startswith(f"dead turn {first.turn_id}:")
    assert first.session_key in reports[0] and "boom" in reports[0]

    assert redrive(rt).dead == 0
    assert redrive(rt).dead == 0
    assert len(_dead_reports(caplog)) == 1  # not on every sweep

    second = _record(store, settings, "sadder", 0, time.time())
    with store.write() as conn:
        inbox.finish_turn(conn, second.turn_id, inbox.DEAD, time.time(), error="again")
    assert redrive(rt).dead == 1
    reports = _dead_reports(caplog)
    assert len(reports) == 2 and reports[1].startswith(f"dead turn {second.turn_id}:")
    rt.renewer.close()
