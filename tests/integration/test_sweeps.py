"""Beat's sweeps on a real state.db with an injected clock: reset, memory turn, prune, cron."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import select, text

from producers.intake import accept
from shared.db import Store
from shared.db.schema import inbox as inbox_table
from shared.db.schema import routes
from shared.pipeline import cron, leases, outbox, route_sessions
from shared.settings import Settings, load_settings
from shared.store import sessions as session_rows
from shared.store.housekeeping import MEMORY_FLUSH
from tests.integration.storekit import (
    fill_in_segments,
    fts_integrity_check,
    fts_segment_counts,
    sqlite_only,
)
from tests.pipeline_helpers import ScriptedAgent, make_runtime, turn
from workers.drain import drain
from workers.sweeps import cron as cron_sweep
from workers.sweeps import index, prune, reset, titles

pytestmark = pytest.mark.both_databases

T0 = 1_780_000_000.0  # a fixed "now" (2026-05-28)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _settings(env: dict[str, str], **extra: str) -> Settings:
    return load_settings({**env, "HERMES_PIPELINE__RETRY_BACKOFF_SECONDS": "0", **extra})


def _chat(rt, store, settings, clock, n: int = 0, chat: str = "42"):  # type: ignore[no-untyped-def]
    t = turn(n, chat, platform="telegram", chat_type="dm")
    key = accept(store, rt.waker, t, settings=settings, clock=clock).session_key
    drain(rt, key)
    return key


def _route_session(store: Store, key: str) -> str | None:
    with store.read() as conn:
        return conn.execute(select(routes.c.session_id).where(routes.c.session_key == key)).scalar()


@pytest.fixture
def idle_env(hermes_env: dict[str, str]) -> Settings:
    return _settings(
        hermes_env, HERMES_SESSION_RESET__MODE="idle", HERMES_SESSION_RESET__IDLE_MINUTES="30"
    )


def test_idle_reset_runs_one_memory_turn_then_ends_and_tells_the_user(
    idle_env: Settings, store: Store
) -> None:
    clock = Clock(T0)
    agent = ScriptedAgent()
    rt, _ = make_runtime(idle_env, store, agent, clock=clock)
    key = _chat(rt, store, idle_env, clock)
    first = _route_session(store, key)
    assert first is not None
    clock.now = T0 + 29 * 60
    assert reset.sweep(rt).memory_turns == []  # not idle long enough
    clock.now = T0 + 31 * 60
    report = reset.sweep(rt)
    assert report.memory_turns == [first] and report.ended == []
    assert reset.sweep(rt).memory_turns == []  # a double fire queues nothing more
    restarted, _ = make_runtime(idle_env, store, agent, clock=clock)
    assert reset.sweep(restarted).memory_turns == []  # nor does a restart
    drain(rt, key)  # the memory turn, in the session's own line
    assert agent.calls.count(agent.calls[-1]) == 1 and "memory tool" in agent.calls[-1]
    with store.read() as conn:
        record = session_rows.require_session(conn, first)
        assert record.message_count == 2  # the memory turn left no messages behind
        kinds = conn.execute(select(inbox_table.c.kind, inbox_table.c.status)).all()
    assert [tuple(k) for k in kinds] == [("message", "done"), (MEMORY_FLUSH, "done")]
    ended = reset.sweep(rt)
    assert ended.ended == [first]
    with store.read() as conn:
        record = session_rows.require_session(conn, first)
    assert (record.end_reason, record.ended_at) == ("idle", clock.now)
    assert _route_session(store, key) is None
    sent = [row.text for row in rt.senders.get("telegram").sent]  # type: ignore[attr-defined]
    assert sent[-1].startswith("This conversation was reset (no messages for 30 minutes)")
    assert reset.sweep(rt).ended == []
    clock.now += 60
    _chat(rt, store, idle_env, clock, n=1)  # the next message starts a new session
    second = _route_session(store, key)
    assert second is not None and second != first


def test_a_memory_turn_for_a_session_that_moved_on_is_cancelled(
    idle_env: Settings, store: Store
) -> None:
    """The memory turn names its session (inbox.flush_session_id): once the route points
    elsewhere (/new ran first), the drain cancels it instead of running it in the new session."""
    clock = Clock(T0)
    agent = ScriptedAgent()
    rt, _ = make_runtime(idle_env, store, agent, clock=clock)
    key = _chat(rt, store, idle_env, clock)
    first = _route_session(store, key)
    clock.now = T0 + 31 * 60
    assert reset.sweep(rt).memory_turns == [first]
    with store.read() as conn:
        queued = conn.execute(
            select(inbox_table.c.flush_session_id).where(inbox_table.c.kind == MEMORY_FLUSH)
        ).scalar_one()
    assert queued == first
    with store.write() as conn:
        route_sessions.detach(conn, key, clock.now)
    calls = len(agent.calls)
    drain(rt, key)
    assert len(agent.calls) == calls
    with store.read() as conn:
        kinds = conn.execute(select(inbox_table.c.kind, inbox_table.c.status)).all()
    assert [tuple(k) for k in kinds] == [("message", "done"), (MEMORY_FLUSH, "cancelled")]


def test_a_session_with_a_turn_in_line_is_not_reset(idle_env: Settings, store: Store) -> None:
    clock = Clock(T0)
    rt, _ = make_runtime(idle_env, store, ScriptedAgent(), clock=clock)
    key = _chat(rt, store, idle_env, clock)
    clock.now = T0 + 3600
    accept(store, rt.waker, turn(1, "42", platform="telegram"), settings=idle_env, clock=clock)
    report = reset.sweep(rt)
    assert report.skipped_busy == 1 and not report.memory_turns and not report.ended
    assert _route_session(store, key) is not None


def test_overrides_platform_wins_over_chat_type(hermes_env: dict[str, str], store: Store) -> None:
    settings = _settings(
        hermes_env,
        HERMES_SESSION_RESET__MODE="idle",
        HERMES_SESSION_RESET__IDLE_MINUTES="30",
        HERMES_SESSION_RESET__CHAT_TYPES__DM__MODE="none",
        HERMES_SESSION_RESET__PLATFORMS__TELEGRAM__MODE="idle",
        HERMES_SESSION_RESET__PLATFORMS__TELEGRAM__IDLE_MINUTES="10",
    )
    clock = Clock(T0)
    rt, _ = make_runtime(settings, store, ScriptedAgent(), clock=clock)
    _chat(rt, store, settings, clock)
    clock.now = T0 + 11 * 60
    assert len(reset.sweep(rt).memory_turns) == 1  # telegram's 10 minutes beat dm's "none"


def test_a_session_without_real_history_ends_without_a_memory_turn(
    hermes_env: dict[str, str], store: Store
) -> None:
    settings = _settings(
        hermes_env,
        HERMES_SESSION_RESET__MODE="daily",
        HERMES_SESSION_RESET__AT_HOUR="4",
        HERMES_SESSION_RESET__NOTIFY="false",
    )
    clock = Clock(T0)
    rt, _ = make_runtime(settings, store, ScriptedAgent(), clock=clock)
    key = _chat(rt, store, settings, clock, n=0)
    with store.write() as conn:  # only commands so far: no exchange to remember
        conn.execute(text("DELETE FROM messages"))
    clock.now = T0 + 86400
    report = reset.sweep(rt)
    assert report.memory_turns == [] and len(report.ended) == 1
    with store.read() as conn:
        assert session_rows.require_session(conn, report.ended[0]).end_reason == "daily"
        assert outbox.pending(conn, "telegram:42") == []
    assert _route_session(store, key) is None


def _aged_sessions(store: Store, now: float) -> dict[str, str]:
    """Three sessions: ended long ago, ended recently, still live (but long inactive)."""
    ids = {
        "old": "20250101_000000_aaaaaa",
        "recent": "20250101_000000_bbbbbb",
        "live": "20250101_000000_cccccc",
    }
    with store.write() as conn:
        for name, session_id in ids.items():
            session_rows.create_session(
                conn, session_id=session_id, source="telegram", now=now - 200 * 86400
            )
            for n in range(3):
                from shared.store.messages import append_message

                append_message(
                    conn, session_id, "user", f"{name} text {n} " * 200, now=now - 200 * 86400
                )
        session_rows.end_session(conn, ids["old"], "idle", now - 100 * 86400)
        session_rows.end_session(conn, ids["recent"], "idle", now - 10 * 86400)
    return ids


def test_prune_touches_only_ended_sessions_past_retention_and_keeps_its_interval(
    hermes_env: dict[str, str], store: Store
) -> None:
    settings = _settings(
        hermes_env, HERMES_SESSIONS__AUTO_PRUNE="true", HERMES_MAINTENANCE__VACUUM_PAUSE_MS="0"
    )
    clock = Clock(T0)
    rt, _ = make_runtime(settings, store, clock=clock)
    ids = _aged_sessions(store, T0)
    report = prune.sweep(rt)
    assert (report.reason, report.sessions, report.messages) == ("done", 1, 3)
    if store.dialect == "sqlite":
        assert report.pages_freed > 0 and report.bytes_after < report.bytes_before
    else:  # the server's autovacuum gives the space back
        assert report.reclaimed is None
    with store.read() as conn:
        left = {r.id for r in [session_rows.get_session(conn, i) for i in ids.values()] if r}
        if store.dialect == "sqlite":
            assert conn.execute(text("PRAGMA integrity_check")).scalar_one() == "ok"
    assert left == {ids["recent"], ids["live"]}
    clock.now += 3600
    assert prune.sweep(rt).reason == "not-due"  # min_interval_hours = 24, shared via state_meta
    other, _ = make_runtime(settings, store, clock=clock)
    assert prune.sweep(other).reason == "not-due"  # another process sees the same bookkeeping
    clock.now += 24 * 3600
    assert prune.sweep(other).reason == "done"


def test_prune_is_off_unless_enabled_and_two_runs_never_overlap(
    hermes_env: dict[str, str], store: Store
) -> None:
    rt, _ = make_runtime(_settings(hermes_env), store)
    assert prune.sweep(rt).reason == "disabled"
    on = _settings(hermes_env, HERMES_SESSIONS__AUTO_PRUNE="true")
    first, _ = make_runtime(on, store)
    second, _ = make_runtime(on, store)
    from shared.pipeline import leases

    with store.write() as conn:
        held = leases.acquire_named(conn, prune.LEASE, "someone-else", first.clock(), 60)
    assert held is not None
    assert prune.sweep(second).reason == "busy"


def test_prune_leaves_both_search_indexes_merged(hermes_env: dict[str, str], store: Store) -> None:
    """Deleted rows stay in the old segments (and slow every query) until a merge rewrites
    them: the sweep merges the word and the substring index after its deletes."""
    sqlite_only(store, "FTS5 segments")
    settings = _settings(
        hermes_env, HERMES_SESSIONS__AUTO_PRUNE="true", HERMES_MAINTENANCE__VACUUM_PAUSE_MS="0"
    )
    old = fill_in_segments(
        store, sessions=30, started=T0 - 200 * 86400, ended=T0 - 100 * 86400, prefix="20250101"
    )
    kept = fill_in_segments(store, sessions=10, started=T0 - 86400, ended=None, prefix="20260101")
    assert all(count > 1 for count in fts_segment_counts(store).values())
    rt, _ = make_runtime(settings, store, clock=Clock(T0))
    report = prune.sweep(rt)
    assert (report.reason, report.sessions) == ("done", len(old))
    assert fts_segment_counts(store) == {"messages_fts": 1, "messages_cjk": 1}
    with store.read() as conn:
        fts_integrity_check(conn)
        found = conn.execute(
            text(
                "SELECT DISTINCT m.session_id FROM messages_cjk AS f JOIN messages AS m"
                " ON m.id = f.rowid WHERE messages_cjk MATCH '会议记'"
            )
        ).scalars()
        assert sorted(found) == kept


def test_index_sweep_merges_what_traffic_piled_up_and_waits_for_a_running_prune(
    hermes_env: dict[str, str], store: Store
) -> None:
    rt, _ = make_runtime(_settings(hermes_env), store, clock=Clock(T0))
    fill_in_segments(store, sessions=2, started=T0 - 86400, ended=None, prefix="20260101")
    assert index.sweep(rt).reason == "not-needed"  # a few segments: left alone
    sqlite_only(store, "FTS5 segments (the sweep has nothing to merge on PostgreSQL)")
    fill_in_segments(store, sessions=60, started=T0 - 86400, ended=None, prefix="20260102")
    before = fts_segment_counts(store)
    assert min(before.values()) > index.MAX_SEGMENTS
    with store.write() as conn:
        held = leases.acquire_named(conn, prune.LEASE, "a-prune", T0, 60)
    assert held is not None
    assert index.sweep(rt).reason == "busy"
    assert fts_segment_counts(store) == before
    with store.write() as conn:
        leases.release_named(conn, held)
    report = index.sweep(rt)
    assert report.reason == "merged" and report.segments_before == sum(before.values())
    assert all(count <= index.MAX_SEGMENTS for count in fts_segment_counts(store).values())
    with store.read() as conn:
        fts_integrity_check(conn)
        hits = conn.execute(
            text("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'deploy'")
        ).scalar_one()
    assert hits == 62 * 4


def test_index_sweep_lets_appends_merge_again_after_a_killed_maintenance_run(
    hermes_env: dict[str, str], store: Store
) -> None:
    from shared.db import sqlite as store_sqlite

    sqlite_only(store, "FTS5 automerge settings")
    with store.write() as conn:  # what a prune killed mid-merge leaves behind
        for table in store_sqlite.FTS_INDEXES:
            store_sqlite.fts_hold_automerge(conn, table, True)
    fill_in_segments(store, sessions=10, started=T0 - 86400, ended=None, prefix="20260101")
    rt, _ = make_runtime(_settings(hermes_env), store, clock=Clock(T0))
    assert index.sweep(rt).reason == "merged"
    with store.read() as conn:
        automerge = {
            table: conn.execute(
                text(f"SELECT v FROM {table}_config WHERE k = 'automerge'")
            ).scalar_one()
            for table in store_sqlite.FTS_INDEXES
        }
    assert automerge == {"messages_fts": 4, "messages_cjk": 4}


def _job(store: Store, now: float, **kw: str) -> cron.CronJob:
    with store.write() as conn:
        return cron.add_job(conn, schedule="0 9 * * *", prompt="morning summary", now=now, **kw)


def test_cron_runs_each_slot_once_across_double_fires_restarts_and_downtime(
    hermes_env: dict[str, str], store: Store
) -> None:
    settings = _settings(hermes_env)
    created = T0 - (T0 % 86400)  # midnight UTC
    clock = Clock(created + 9 * 3600 - 1)
    rt, _ = make_runtime(settings, store, ScriptedAgent(), clock=clock)
    job = _job(store, created)
    assert cron_sweep.tick(rt) == []
    clock.now = created + 9 * 3600
    assert cron_sweep.tick(rt) == [(job.id, created + 9 * 3600)]
    assert cron_sweep.tick(rt) == []  # double fire
    restarted, _ = make_runtime(settings, store, ScriptedAgent(), clock=clock)
    assert cron_sweep.tick(restarted) == []  # restart
    clock.now = created + 3 * 86400 + 12 * 3600  # three days down
    started = cron_sweep.tick(rt)
    assert started == [(job.id, created + 3 * 86400 + 9 * 3600)]  # once, for the latest slot
    with store.read() as conn:
        turns = conn.execute(select(inbox_table.c.kind).where(inbox_table.c.platform == "cron"))
        assert list(turns.scalars()) == ["cron", "cron"]


def test_two_beats_ticking_at_once_start_one_run(hermes_env: dict[str, str], store: Store) -> None:
    settings = _settings(hermes_env)
    created = T0 - (T0 % 86400)
    clock = Clock(created + 9 * 3600 + 5)
    _job(store, created)
    beats = [make_runtime(settings, store, clock=clock)[0] for _ in range(4)]
    results: list[list[tuple[str, float]]] = []
    threads = [
        threading.Thread(target=lambda b=b: results.append(cron_sweep.tick(b))) for b in beats
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sum(len(r) for r in results) == 1


def test_a_cron_run_is_a_turn_in_its_own_session_delivered_where_asked(
    hermes_env: dict[str, str], store: Store
) -> None:
    settings = _settings(hermes_env)
    created = T0 - (T0 % 86400)
    clock = Clock(created + 9 * 3600)
    rt, waker = make_runtime(settings, store, ScriptedAgent(), clock=clock)
    to_chat = _job(store, created, name="to-chat", deliver_platform="telegram", deliver_chat="777")
    quiet = _job(store, created, name="quiet")
    for _job_id, _slot in cron_sweep.tick(rt):
        pass
    for key, _ in list(waker.drains):
        drain(rt, key)
    with store.read() as conn:
        sources = conn.execute(text("SELECT source, title IS NULL FROM sessions")).all()
        pending_quiet = outbox.pending(conn, f"cron:{quiet.id}")
    assert sorted(s for s, _ in sources) == ["cron", "cron"]
    sent = rt.senders.get("telegram").sent  # type: ignore[attr-defined]
    assert [(row.chat_id, row.text) for row in sent] == [("777", "reply to morning summary")]
    assert pending_quiet == []  # no target: the reply stays in the job's session
    del to_chat


class _ModelTitles:
    """An auxiliary model as the drain sees it (not the offline heuristics)."""

    name = "scripted"

    def title(self, first_user: str, first_reply: str) -> str:
        return "Scripted title"


def test_title_sweep_catches_sessions_whose_title_task_was_lost(
    hermes_env: dict[str, str], store: Store
) -> None:
    settings = _settings(hermes_env)
    clock = Clock(T0)
    agent = ScriptedAgent()
    agent.auxiliary = _ModelTitles()  # type: ignore[attr-defined]  # titles by a model: a task
    rt, waker = make_runtime(settings, store, agent, clock=clock)
    _chat(rt, store, settings, clock)
    with store.read() as conn:
        session_id = conn.execute(text("SELECT id FROM sessions")).scalar_one()
    assert waker.autotitles == [session_id]  # sent by the drain; pretend the broker lost it
    waker.autotitles.clear()
    clock.now = T0 + 10
    assert titles.sweep(rt) == []  # give the session's own title task a minute
    clock.now = T0 + 120
    assert titles.sweep(rt) == [session_id]
    assert waker.autotitles == [session_id]
