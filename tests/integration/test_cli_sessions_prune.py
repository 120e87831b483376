"""`hermes sessions prune`: ended sessions only, source filter, what it shows, space reclaimed."""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import datetime
from types import SimpleNamespace

import pytest
from sqlalchemy import event, text
from sqlalchemy.pool import Pool

from producers.cli import prune
from producers.cli.prune import PRUNE_BATCH, PRUNE_BATCH_MESSAGES
from producers.cli.space import FULL_VACUUM_WARNING
from shared.db import Store, open_store
from shared.settings import Settings
from shared.store.messages import append_message
from shared.store.session_listing import stats
from shared.store.sessions import create_session, end_session, get_session, prune_batch
from tests.integration.storekit import (
    fill_in_segments,
    fts_integrity_check,
    fts_segment_counts,
    sqlite_only,
)
from tests.integration.test_cli_sessions_support import (
    DAY,
    NOW,
    Msg,
    Seed,
    hermes,
    invoke,
    message_total,
    seed,
    session_ids,
)

pytestmark = pytest.mark.both_databases

OLD_ENDED = "20250101_000000_aaaaaa"
OLD_ENDED_SLACK = "20250102_000000_bbbbbbbb"
RECENT_ENDED = "20250601_000000_cccccc"
OLD_LIVE = "20241201_000000_dddddd"


@pytest.fixture
def mixed(store: Store) -> Store:
    seed(
        store,
        Seed(
            OLD_ENDED,
            title="old chat",
            started=NOW - 200 * DAY,
            ended=NOW - 150 * DAY,
            messages=[Msg("user", "a"), Msg("assistant", "b")],
        ),
        Seed(
            OLD_ENDED_SLACK,
            source="slack",
            title="slack thread",
            started=NOW - 120 * DAY,
            ended=NOW - 100 * DAY,
            messages=[Msg("user", "c")],
        ),
        Seed(RECENT_ENDED, started=NOW - 20 * DAY, ended=NOW - 10 * DAY),
        # Started long ago and never ended: live, whatever its age.
        Seed(OLD_LIVE, started=NOW - 365 * DAY),
        Seed("20250615_000000_eeeeee", parent=OLD_ENDED, started=NOW - 140 * DAY),
    )
    return store


def date(ts: float) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d")


def test_prune_deletes_only_ended_sessions_past_the_cutoff(
    settings: Settings, mixed: Store
) -> None:
    result = invoke(settings, ["sessions", "prune", "--yes"])
    assert result.exit_code == 0, result.output
    assert "Deleted 2 sessions (3 messages)." in result.output
    assert session_ids(mixed) == [OLD_LIVE, RECENT_ENDED, "20250615_000000_eeeeee"]
    with mixed.read() as conn:
        orphan = get_session(conn, "20250615_000000_eeeeee")
        totals = stats(conn)
    assert orphan is not None and orphan.parent_session_id is None
    assert (totals.sessions, totals.messages) == (3, 3)
    assert message_total(mixed) == 3


def test_prune_older_than_and_source(settings: Settings, mixed: Store) -> None:
    result = invoke(settings, ["sessions", "prune", "--source", "slack", "--yes"])
    assert "Deleted 1 session (1 message)." in result.output
    assert OLD_ENDED in session_ids(mixed) and OLD_ENDED_SLACK not in session_ids(mixed)
    invoke(settings, ["sessions", "prune", "--older-than", "5", "--yes"])
    assert session_ids(mixed) == [OLD_LIVE, "20250615_000000_eeeeee"]


def test_prune_shows_what_it_will_delete_and_a_no_keeps_everything(
    settings: Settings, mixed: Store
) -> None:
    result = invoke(settings, ["sessions", "prune"], input="n\n")
    assert result.exit_code == 1
    shown = (
        f"Will delete 2 ended sessions (3 messages), ended {date(NOW - 150 * DAY)} … "
        f'{date(NOW - 100 * DAY)}, e.g. "slack thread", "old chat".'
    )
    assert shown in result.output
    assert "Delete them? [y/N]" in result.output
    assert "Aborted; nothing deleted." in result.output
    assert len(session_ids(mixed)) == 5


def test_prune_dry_run_deletes_nothing(settings: Settings, mixed: Store) -> None:
    result = invoke(settings, ["sessions", "prune", "--dry-run", "--source", "cli"])
    assert result.exit_code == 0
    assert result.output.startswith(
        f'Will delete 1 ended session (2 messages), ended {date(NOW - 150 * DAY)}, e.g. "old chat"'
        " from cli."
    )
    assert "Dry run: nothing deleted." in result.output
    assert len(session_ids(mixed)) == 5


def test_prune_with_nothing_to_do(settings: Settings, mixed: Store) -> None:
    result = invoke(settings, ["sessions", "prune", "--older-than", "1000", "--yes"])
    assert result.exit_code == 0
    assert result.output.strip() == "Nothing to prune: no sessions ended more than 1000 days ago."
    assert "Reclaimed" not in result.output
    one = invoke(settings, ["sessions", "prune", "--older-than", "1", "--source", "x", "--yes"])
    assert one.output.strip() == "Nothing to prune: no sessions from x ended more than 1 day ago."


def test_prune_in_batches_reclaims_space(hermes_env: dict[str, str], store: Store) -> None:
    count = PRUNE_BATCH + 37
    _old_sessions(store, count)
    seed(store, Seed("20250615_000000_ffffff", messages=[Msg("user", "survivor")]))
    done = hermes(hermes_env, "sessions", "prune", "--yes")
    assert done.returncode == 0, done.stderr
    assert f"Deleted {count:,} sessions ({2 * count:,} messages)." in done.stdout
    assert done.stderr == ""  # no progress bar into a pipe
    assert session_ids(store) == ["20250615_000000_ffffff"]
    if store.dialect != "sqlite":  # the server's autovacuum gives space back, not the prune
        assert "Reclaimed" not in done.stdout
        return
    match = re.search(r"was .* \(([\d,]+) bytes\), now .* \(([\d,]+) bytes\)", done.stdout)
    assert match, done.stdout
    before, after = (int(group.replace(",", "")) for group in match.groups())
    assert after < before / 2
    assert store.path is not None
    on_disk = store.path.stat().st_size
    wal = store.path.with_name(store.path.name + "-wal")
    assert on_disk + (wal.stat().st_size if wal.exists() else 0) == after


def test_prune_leaves_both_search_indexes_merged(settings: Settings, store: Store) -> None:
    sqlite_only(store, "FTS5 segments and PRAGMA integrity_check")
    old = fill_in_segments(
        store, sessions=30, started=NOW - 200 * DAY, ended=NOW - 100 * DAY, prefix="20250101"
    )
    kept = fill_in_segments(store, sessions=10, started=NOW - DAY, ended=None, prefix="20250614")
    assert all(count > 1 for count in fts_segment_counts(store).values())
    result = invoke(settings, ["sessions", "prune", "--yes"])
    assert result.exit_code == 0, result.output
    assert f"Deleted {len(old)} sessions" in result.output
    assert fts_segment_counts(store) == {"messages_fts": 1, "messages_cjk": 1}
    with store.read() as conn:
        fts_integrity_check(conn)
        assert conn.execute(text("PRAGMA integrity_check")).scalar_one() == "ok"
    assert session_ids(store) == kept


def test_prune_respects_vacuum_after_prune_false(hermes_env: dict[str, str], mixed: Store) -> None:
    env = {**hermes_env, "HERMES_SESSIONS__VACUUM_AFTER_PRUNE": "false"}
    done = hermes(env, "sessions", "prune", "--yes")
    assert done.returncode == 0, done.stderr
    # The script runs on the real clock: how many are old enough depends on today.
    assert "Deleted " in done.stdout and "Reclaimed" not in done.stdout


def test_a_failed_vacuum_still_reports_the_prune(
    settings: Settings, mixed: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    def locked(_store: Store, *_args: object, **_kw: object) -> None:
        raise prune.ReclaimError("database is locked")

    monkeypatch.setattr(prune, "reclaim", locked)
    result = invoke(settings, ["sessions", "prune", "--yes"])
    assert result.exit_code == 0, result.output
    assert "Deleted 2 sessions (3 messages)." in result.output
    assert "Could not reclaim space now (database is locked)" in result.output
    assert len(session_ids(mixed)) == 3


def test_prune_batches_are_bounded_by_messages_too(mixed: Store) -> None:
    cutoff = NOW - 90 * DAY
    with mixed.write() as conn:
        # The oldest has 2 messages, over the bound: one of them goes, the session stays.
        assert prune_batch(conn, ended_before=cutoff, max_messages=1) == (0, 1)
    with mixed.write() as conn:
        assert prune_batch(conn, ended_before=cutoff, max_messages=1) == (1, 1)
    with mixed.write() as conn:
        assert prune_batch(conn, ended_before=cutoff, max_messages=1) == (1, 1)
    with mixed.write() as conn:
        assert prune_batch(conn, ended_before=cutoff, max_messages=1) == (0, 0)
    assert OLD_LIVE in session_ids(mixed) and RECENT_ENDED in session_ids(mixed)


def test_a_session_over_the_bound_goes_in_slices_and_counters_follow(mixed: Store) -> None:
    """One huge old session never makes one long delete: its messages go a slice per batch."""
    cutoff = NOW - 90 * DAY
    big = "20240101_000000_b1b1b1"
    with mixed.write() as conn:
        create_session(conn, session_id=big, source="cli", now=NOW - 400 * DAY)
        for n in range(7):
            append_message(conn, big, "user", f"old words {n}", now=NOW - 400 * DAY)
        end_session(conn, big, "cli_exit", NOW - 399 * DAY)  # the oldest ended: first in line
        before = stats(conn)
    steps = []
    while True:
        with mixed.write() as conn:
            step = prune_batch(conn, ended_before=cutoff, max_messages=3)
        if step == (0, 0):
            break
        steps.append(step)
    assert steps[:2] == [(0, 3), (0, 3)]  # 3 + 3 of its messages, then the session goes
    assert steps[2][0] >= 1 and all(m <= 3 for _, m in steps)
    assert big not in session_ids(mixed)
    with mixed.read() as conn:
        after = stats(conn)
        left = conn.execute(text("SELECT count(*) FROM messages")).scalar_one()
        if mixed.dialect == "sqlite":
            assert conn.execute(text("PRAGMA integrity_check")).scalar_one() == "ok"
    assert after.messages == left  # the kept counters match the rows
    assert before.messages - after.messages == sum(m for _, m in steps)


def _old_sessions(store: Store, count: int) -> None:
    body = "lorem ipsum dolor sit amet " * 80
    seed(
        store,
        *(
            Seed(
                f"20250101_{i:06d}_abcdef",
                started=NOW - 200 * DAY,
                ended=NOW - 100 * DAY,
                messages=[Msg("user", body), Msg("assistant", body)],
            )
            for i in range(count)
        ),
    )


class _Interleave:
    """The prune's pause, made to wait until a concurrent writer has committed once more:
    proof that turn writes get in between the prune's write transactions."""

    def __init__(self) -> None:
        self.pauses = 0
        self.commits = 0
        self.changed = threading.Condition()

    def committed(self) -> None:
        with self.changed:
            self.commits += 1
            self.changed.notify_all()

    def sleep(self, _seconds: float) -> None:
        self.pauses += 1
        with self.changed:
            target = self.commits + 1
            assert self.changed.wait_for(lambda: self.commits >= target, timeout=30)


@contextmanager
def _statements() -> Iterator[list[str]]:
    """Every SQL statement any new SQLite connection runs, as SQLite itself traces them."""
    seen: list[str] = []

    def trace(dbapi_conn: sqlite3.Connection, _record: object) -> None:
        dbapi_conn.set_trace_callback(seen.append)

    event.listen(Pool, "connect", trace)
    try:
        yield seen
    finally:
        event.remove(Pool, "connect", trace)


def _file_bytes(store: Store) -> int:
    """state.db alone, with every committed page copied in from the WAL."""
    assert store.path is not None
    with closing(sqlite3.connect(store.path, isolation_level=None)) as conn:
        assert conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
    return store.path.stat().st_size


def test_prune_gives_space_back_in_steps_while_a_writer_keeps_committing(
    settings: Settings, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    sqlite_only(store, "incremental vacuum of state.db (the server's autovacuum does this)")
    _old_sessions(store, 300)
    seed(store, Seed("20250615_000000_ffffff", messages=[Msg("user", "survivor")]))
    size_before = _file_bytes(store)
    pace = _Interleave()
    monkeypatch.setattr(prune, "time", SimpleNamespace(sleep=pace.sleep))
    stop = threading.Event()
    errors: list[BaseException] = []
    writer = open_store(settings.resolved_database_url)  # its own engine and writer gate

    def chat() -> None:
        try:
            while not stop.is_set():
                with writer.write() as conn:
                    append_message(conn, "20250615_000000_ffffff", "user", "still here", now=NOW)
                pace.committed()
                time.sleep(0.002)
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)
            pace.committed()  # release a waiting pause; the test fails on `errors`

    with _statements() as seen:
        thread = threading.Thread(target=chat)
        thread.start()
        try:
            result = invoke(settings, ["sessions", "prune", "--yes"])
        finally:
            stop.set()
            thread.join(30)
            writer.close()
    assert result.exit_code == 0, result.output
    assert errors == []
    assert "Deleted 300 sessions (600 messages)." in result.stdout
    assert "Reclaimed space: state.db was" in result.stdout and "Warning" not in result.output
    vacuums = [sql for sql in seen if sql.strip().upper().startswith("VACUUM")]
    assert vacuums == []  # no full VACUUM: it would hold every writer off until it ends
    assert any("incremental_vacuum" in sql for sql in seen)
    # Deletes (200 messages each) and reclaim steps paused, and a write got in at every pause.
    assert pace.pauses >= 600 // PRUNE_BATCH_MESSAGES + 1
    assert pace.commits >= pace.pauses
    with store.read() as conn:
        assert conn.execute(text("PRAGMA freelist_count")).scalar_one() == 0
        assert conn.execute(text("PRAGMA integrity_check")).scalar_one() == "ok"
    assert _file_bytes(store) < size_before / 2
    assert message_total(store) == 1 + pace.commits


def test_an_old_file_without_incremental_vacuum_falls_back_to_vacuum_with_a_warning(
    settings: Settings, store: Store
) -> None:
    sqlite_only(store, "a state.db made before incremental auto-vacuum")
    _old_sessions(store, 100)
    assert store.path is not None
    with closing(sqlite3.connect(store.path, isolation_level=None)) as old:
        old.execute("PRAGMA auto_vacuum = NONE")
        old.execute("VACUUM")  # as a file made before incremental auto-vacuum
        assert old.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    result = invoke(settings, ["sessions", "prune", "--yes"])
    assert result.exit_code == 0, result.output
    assert "Deleted 100 sessions (200 messages)." in result.stdout
    assert result.stderr == f"Warning: {FULL_VACUUM_WARNING}\n"
    assert "locks out every writer" in result.stderr
    match = re.search(r"\(([\d,]+) bytes\), now .* \(([\d,]+) bytes\)", result.stdout)
    assert match, result.stdout
    before, after = (int(group.replace(",", "")) for group in match.groups())
    assert after < before / 2
    with store.read() as conn:
        assert conn.execute(text("PRAGMA freelist_count")).scalar_one() == 0
