"""Writers under contention: BEGIN IMMEDIATE, busy timeout, WAL, file modes, fork safety."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest
from sqlalchemy import text

from shared.db import Store, open_store
from shared.db.migrate import HEAD
from shared.store import messages as message_rows
from shared.store import session_listing
from shared.store import sessions as session_rows
from tests.integration.storekit import counter_drift, fts_integrity_check, raw, sqlite_url

ROOT = Path(__file__).resolve().parents[2]


def try_begin_immediate(path: Path) -> str | None:
    """None when another connection can take the write lock right now, else SQLite's error."""
    conn = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        conn.execute("PRAGMA busy_timeout = 0")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return None
    except sqlite3.OperationalError as error:
        return str(error)
    finally:
        conn.close()


def test_write_takes_the_write_lock_at_begin(store: Store) -> None:
    assert store.path is not None
    assert try_begin_immediate(store.path) is None
    with store.write():
        # Nothing executed yet: a DEFERRED begin would hold no lock at this point.
        assert try_begin_immediate(store.path) == "database is locked"
    assert try_begin_immediate(store.path) is None


def test_write_lock_is_released_after_an_error(store: Store) -> None:
    assert store.path is not None
    with pytest.raises(ZeroDivisionError), store.write():
        _ = 1 / 0
    assert try_begin_immediate(store.path) is None


def test_readers_do_not_block_the_writer_and_see_a_snapshot(store: Store) -> None:
    assert store.path is not None
    with store.write() as conn:
        session_rows.create_session(conn, session_id="a", source="cli", now=1.0)
    with store.read() as reader:
        before = reader.execute(text("SELECT COUNT(*) FROM messages")).scalar()
        assert try_begin_immediate(store.path) is None
        with store.write() as writer:  # WAL: a writer proceeds beside an open reader
            message_rows.append_message(writer, "a", "user", "hi", now=2.0)
        assert reader.execute(text("SELECT COUNT(*) FROM messages")).scalar() == before
    with store.read() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM messages")).scalar() == before + 1


def test_threads_writing_at_once_never_see_locked(store: Store) -> None:
    threads_n, rounds = 8, 40
    with store.write() as conn:
        session_rows.create_session(conn, session_id="shared", source="cli", now=0.0)
    errors: list[BaseException] = []
    start = threading.Barrier(threads_n)

    def work(worker: int) -> None:
        try:
            start.wait()
            for i in range(rounds):
                with store.write() as conn:
                    # Read, then write, in one transaction: with a deferred BEGIN two of
                    # these upgrade their read locks at once and one gets SQLITE_BUSY.
                    count = conn.execute(
                        text("SELECT message_count FROM sessions WHERE id = 'shared'")
                    ).scalar_one()
                    message_rows.append_message(
                        conn, "shared", "user", f"w{worker} r{i} c{count}", now=float(i)
                    )
                    if i % 10 == 0:
                        sid = f"t{worker}_{i}"
                        session_rows.create_session(conn, session_id=sid, source="telegram", now=1)
                        message_rows.append_message(conn, sid, "user", "x", now=1.0)
        except BaseException as error:  # collected and re-raised in the test thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with store.read() as conn:
        shared = session_rows.require_session(conn, "shared")
        assert shared.message_count == threads_n * rounds
        assert counter_drift(conn) == []
        fts_integrity_check(conn)


WRITER = """
import sys
from shared.db import open_store
from shared.store import messages as message_rows
from shared.store import sessions as session_rows
from shared.db.migrate import HEAD
from sqlalchemy import text

url, worker, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = open_store(url)
for i in range(rounds):
    with store.write() as conn:
        conn.execute(text("SELECT message_count FROM sessions WHERE id = 'shared'")).scalar_one()
        message_rows.append_message(conn, "shared", "user", f"{worker} {i}", now=float(i))
        if i % 25 == 0:
            sid = f"{worker}_{i}"
            session_rows.create_session(conn, session_id=sid, source=worker, now=1.0)
import os
paths = [url.removeprefix("sqlite:///") + suffix for suffix in ("", "-wal", "-shm")]
print(" ".join(f"{oct(os.stat(p).st_mode & 0o777)}" for p in paths if os.path.exists(p)))
store.close()
"""


def run_writers(url: str, workers: int, rounds: int, umask: int | None = None) -> list[str]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, url, f"proc{n}", str(rounds)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            umask=-1 if umask is None else umask,
        )
        for n in range(workers)
    ]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert "locked" not in err
        outputs.append(out.strip())
    return outputs


def test_processes_writing_at_once_never_see_locked(store: Store) -> None:
    assert store.path is not None
    with store.write() as conn:
        session_rows.create_session(conn, session_id="shared", source="cli", now=0.0)
    workers, rounds = 4, 100
    run_writers(sqlite_url(store.path), workers, rounds)
    with store.read() as conn:
        assert session_rows.require_session(conn, "shared").message_count == workers * rounds
        assert counter_drift(conn) == []
        fts_integrity_check(conn)
        by_source = {s: n for s, n, _ in session_listing.stats(conn).by_source}
    assert by_source == {"cli": 1, **{f"proc{n}": rounds // 25 for n in range(workers)}}


def modes(path: Path) -> dict[str, int]:
    found = {}
    for suffix in ("", "-wal", "-shm"):
        candidate = Path(f"{path}{suffix}")
        if candidate.exists():
            found[suffix or "db"] = candidate.stat().st_mode & 0o777
    return found


def test_files_are_owner_only_after_writes_from_another_process(store: Store) -> None:
    assert store.path is not None
    with store.write() as conn:  # this process keeps the WAL and shm alive
        session_rows.create_session(conn, session_id="shared", source="cli", now=0.0)
    [seen_inside] = run_writers(sqlite_url(store.path), 1, 30, umask=0)
    assert seen_inside == "0o600 0o600 0o600"
    found = modes(store.path)
    assert set(found) == {"db", "-wal", "-shm"}
    assert all(mode == 0o600 for mode in found.values()), found


def test_files_made_by_a_lax_umask_are_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "home" / "state.db"
    [seen_inside] = run_writers(sqlite_url(path), 1, 0, umask=0)
    assert seen_inside.split()[0] == "0o600"
    assert all(mode == 0o600 for mode in modes(path).values())
    assert (tmp_path / "home").stat().st_mode & 0o077 == 0


def test_a_loose_existing_file_is_tightened(hermes_home: Path) -> None:
    path = hermes_home / "state.db"
    open_store(sqlite_url(path)).close()
    path.chmod(0o644)
    opened = open_store(sqlite_url(path))
    try:
        with opened.write() as conn:
            session_rows.create_session(conn, session_id="a", source="cli", now=1.0)
        assert all(mode == 0o600 for mode in modes(path).values()), modes(path)
    finally:
        opened.close()
    assert modes(path) == {"db": 0o600}


def test_a_store_used_after_fork_raises(store: Store) -> None:
    with store.write() as conn:
        session_rows.create_session(conn, session_id="a", source="cli", now=1.0)
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        # Python 3.12+ warns about fork() in a process with threads; this test forks on purpose.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: report what happened, then leave without running pytest's exit
        outcome = []
        for unit in (store.read, store.write):
            try:
                with unit():
                    outcome.append("used")
            except RuntimeError as error:
                outcome.append("fork" if "fork" in str(error) else "other")
            except BaseException:
                outcome.append("other")
        os.write(write_end, ",".join(outcome).encode())
        os._exit(0)
    os.close(write_end)
    _, status = os.waitpid(pid, 0)
    report = os.read(read_end, 100).decode()
    os.close(read_end)
    assert os.waitstatus_to_exitcode(status) == 0
    assert report == "fork,fork"
    with store.read() as conn:  # the parent's store is unharmed
        assert session_rows.require_session(conn, "a").id == "a"


def test_integrity_after_concurrent_writes(store: Store) -> None:
    assert store.path is not None
    with store.write() as conn:
        session_rows.create_session(conn, session_id="shared", source="cli", now=0.0)
    run_writers(sqlite_url(store.path), 2, 50)
    with raw(store.path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


OPENER = """
import sys
from shared.db import open_store
store = open_store(sys.argv[1])
with store.read() as conn:
    from shared.db.migrate import current_revision
    print(current_revision(conn)[0])
store.close()
"""


def test_processes_opening_a_new_file_at_once_make_one_schema(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "home" / "state.db")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPENER, url],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    results = [proc.communicate(timeout=300) for proc in procs]
    for proc, (out, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, err
        assert out.strip() == HEAD
    with raw(tmp_path / "home" / "state.db") as conn:
        assert conn.execute("SELECT COUNT(*) FROM alembic_version").fetchone()[0] == 1


_OPEN_AND_CLOSE = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
conn.execute("INSERT INTO state_meta (key, value) VALUES ('from-another-process', 'x')")
conn.commit()
conn.close()  # deletes the WAL only if it is the last connection to the file anywhere
"""


def test_a_second_store_in_a_process_keeps_the_first_ones_locks(tmp_path: Path) -> None:
    """POSIX locks belong to the process, and closing any descriptor of a file drops all of
    them. The open-time checks read state.db (and its -shm) through descriptors of their own:
    run while this process already had the file open, they dropped the SQLite locks its
    connections held, so another process closing its connection took itself for the last
    one and deleted the WAL under them (the chaos test then saw a reader that never saw the
    workers' writes). A second store of the same file must not touch those descriptors."""
    path = tmp_path / "state.db"
    first = open_store(sqlite_url(path))
    try:
        with first.write() as conn:  # the file is open in WAL mode, with its -wal and -shm
            conn.execute(text("INSERT INTO state_meta (key, value) VALUES ('mine', '1')"))
        with first.read() as conn:
            conn.execute(text("SELECT 1")).all()
        second = open_store(sqlite_url(path))
        second.close()  # this process still has `first` open
        subprocess.run([sys.executable, "-c", _OPEN_AND_CLOSE, str(path)], check=True)
        assert Path(f"{path}-wal").exists(), "another process deleted the WAL we still use"
        with first.read() as conn:
            keys = conn.execute(text("SELECT key FROM state_meta")).scalars().all()
        assert "from-another-process" in keys
    finally:
        first.close()
