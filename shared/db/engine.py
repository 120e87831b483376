"""Opening state.db: one engine per process, schema at head, read and write units of work."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TypeVar

from sqlalchemy import Connection, Engine, create_engine, exc

from shared.db import migrate, sqlite, sqlite_health
from shared.db.errors import StoreError, plainly
from shared.db.group_commit import GroupCommit
from shared.db.pg_pool import autocommitted, pg_engine, transaction

T = TypeVar("T")

# SQLite stores open in this process, per file: (pid, path) -> count. POSIX locks belong to
# the process, and closing any descriptor of a file drops every lock the process holds on it:
# the open-time checks read state.db and its -shm through descriptors of their own, so they run
# only while no store of this process has the file open, or they would drop the locks SQLite's
# connections hold (another process closing its last connection would then take itself for the
# last one anywhere and delete the WAL under them). `_OPENING` makes "look at the count, check,
# count" one step between threads.
_OPEN: dict[tuple[int, str], int] = {}
_OPENING = threading.Lock()


class Store:
    """state.db for one process: `read()` a consistent view; writes are short transactions,
    either a block in the caller's thread (`with store.write() as conn:`) or a function the
    store runs and commits (`store.commit(work)`, `store.commit_each(works)`), which on SQLite
    may share one transaction with other threads' work (group commit)."""

    def __init__(self, engine: Engine, path: Path | None, write_engine: Engine | None = None):
        self._engine = engine
        # SQLite: writers have a connection of their own, used by one thread at a time (the
        # gate's), so a writer never waits for a connection that readers hold, and readers
        # never wait for connections that queued writers hold.
        self._write_engine = write_engine or engine
        self._writer = self._write_engine.execution_options(**{sqlite.BEGIN_OPTION: "IMMEDIATE"})
        self._pid = os.getpid()
        self.path = path
        # SQLite has one writer at a time: a process's writers queue for it together and
        # those that queued share one transaction (group_commit.py).
        self._group = (
            GroupCommit(Path(f"{path}-writer.lock"), self._writer.connect)
            if engine.dialect.name == "sqlite" and path
            else None
        )
        # Other dialects: whether this thread is inside a write (one transaction per thread, as
        # the group enforces on SQLite: a nested one could wait for its own outer one's locks).
        self._inside = threading.local()
        # Told how long each committed write took, waiting for the lock included (metrics).
        self.observe_write: Callable[[float], None] | None = None
        self._counted = False  # in _OPEN (set by `connect`)
        self._write_checked = engine.dialect.name != "sqlite" or path is None
        self._postgresql = engine.dialect.name == "postgresql"
        # After close() every unit of work is refused: SQLAlchemy would otherwise quietly put a
        # new pool behind the disposed engine, and nothing would ever close its connections.
        self._closed = False

    def check_writable(self) -> None:
        """Refuse (StoreError) to write into a read-only or damaged state.db; run once, before
        the first write of this Store (or at a process's start): a read-only file system, then
        `quick_check` when the file is small enough for it to be cheap."""
        if self._write_checked or self.path is None:
            return
        path = self.path

        def check() -> None:
            raw = self._engine.raw_connection()
            try:
                sqlite_health.check_writable(raw.driver_connection, path)  # type: ignore[arg-type]
            finally:
                raw.close()

        guarded(self, check)
        self._write_checked = True

    @property
    def dialect(self) -> str:
        return self._engine.dialect.name

    @property
    def engine(self) -> Engine:
        return self._engine

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_process(self) -> None:
        if self._closed:
            raise RuntimeError("this Store is closed; open another")
        if os.getpid() != self._pid:
            raise RuntimeError("a Store was carried across fork(); build one per process")

    @contextmanager
    def _corrupt_is_store_error(self) -> Iterator[None]:
        """A damaged page found mid-query (the schema pages read at open were fine)."""
        try:
            yield
        except exc.DatabaseError as error:
            if sqlite.is_not_a_database(error.orig or error):
                where = self.path or "the database"
                raise StoreError(f"{where} is corrupt or not a SQLite database") from error
            raise

    @contextmanager
    def _one_per_thread(self) -> Iterator[None]:
        if getattr(self._inside, "write", False):
            raise RuntimeError("store.write() inside store.write(): one transaction per thread")
        self._inside.write = True
        try:
            yield
        finally:
            self._inside.write = False

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """One write transaction (BEGIN IMMEDIATE on SQLite): commit on exit, roll back on error."""
        self._check_process()
        self.check_writable()
        started = time.perf_counter()
        if self._group is None:
            with (
                self._corrupt_is_store_error(),
                self._one_per_thread(),
                self._write_transaction() as conn,
            ):
                yield conn
        else:
            with self._corrupt_is_store_error(), self._group.unit() as conn:
                yield conn
        self._observed(started)

    def _write_transaction(self) -> AbstractContextManager[Connection]:
        """A write transaction of this thread's own (not SQLite's group commit)."""
        if self._postgresql:
            return transaction(self._engine, read_only=False)
        return self._writer.begin()

    def _observed(self, started: float) -> None:
        if self.observe_write is not None:
            self.observe_write(time.perf_counter() - started)

    def commit(self, work: Callable[[Connection], T]) -> T:
        """`work(conn)` as one write transaction; returns its result once committed.

        The same as `with store.write() as conn: return work(conn)`, except that on SQLite
        whichever thread holds the write transaction may run it (group_commit.py): use it on
        hot paths, with functions that do not depend on the thread running them.
        """
        self._check_process()
        self.check_writable()
        started = time.perf_counter()
        with self._corrupt_is_store_error():
            if self._group is None:
                with self._one_per_thread(), self._write_transaction() as conn:
                    result = work(conn)
            else:
                result = self._group.run(work)
        self._observed(started)
        return result

    def commit_alone(self, statement: Callable[[Connection], T]) -> T:
        """`statement(conn)`, which sends exactly one statement, as a write of its own; returns
        its result once committed. A failed statement writes nothing.

        On PostgreSQL the connection is in autocommit (pg_pool.autocommitted): no BEGIN and
        COMMIT around the statement, two round trips fewer. The statement may then run twice
        (again on another connection when its own is found dead, perhaps after it committed):
        it must be safe to, and change nothing but through `conn`. Elsewhere it is `commit`:
        the same result, without the saving (on SQLite the group commit is cheaper still)."""
        if not self._postgresql:
            return self.commit(statement)
        self._check_process()
        started = time.perf_counter()
        with self._one_per_thread():
            result = autocommitted(self._engine, statement)
        self._observed(started)
        return result

    def commit_each(self, works: Sequence[Callable[[Connection], T]]) -> list[T | Exception]:
        """Each of `works` as its own unit in one write transaction (one that raises changes
        nothing and the others go on); returns each result or the exception it raised, once
        committed. If the transaction is lost (its COMMIT fails), every outcome is an error.
        On SQLite the units join the process's group commit.

        All are first tried as one unit (no savepoint each); if one raises, that try is rolled
        back and each runs again in a savepoint of its own. So a work may run twice: it must
        change nothing but through `conn`."""
        self._check_process()
        self.check_writable()
        with contextlib.suppress(Exception):  # if one raised, all was rolled back: now each
            return list(self.commit(lambda conn: [work(conn) for work in works]))  # alone
        if self._group is not None:
            with self._corrupt_is_store_error():
                return self._group.run_many(works)
        outcomes: list[T | Exception] = []
        try:
            with self._one_per_thread(), self._write_transaction() as conn:
                for work in works:
                    try:
                        with conn.begin_nested():
                            outcomes.append(work(conn))
                    except Exception as exc:
                        outcomes.append(exc)
        except Exception as exc:
            return [exc] * len(works)
        return outcomes

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read-only unit of work on one snapshot; nothing it does is committed (on
        PostgreSQL a READ ONLY transaction: a write in it is refused; pg_pool.py says why)."""
        self._check_process()
        if self._postgresql:
            with transaction(self._engine, read_only=True) as conn:
                yield conn
            return
        with self._corrupt_is_store_error(), self._engine.connect() as conn:
            # Begun here, not on the first Core statement: hot statements run on the driver's
            # cursor (prepared.py), and every statement must see the same snapshot.
            conn.begin()
            try:
                yield conn
            finally:
                conn.rollback()

    def close(self) -> None:
        self._closed = True
        if self._counted:
            key = (self._pid, str(self.path))
            with _OPENING:
                if _OPEN.get(key, 0) > 1:
                    _OPEN[key] -= 1
                else:
                    _OPEN.pop(key, None)
            self._counted = False
        if self._group is not None:
            self._group.close()
        self._engine.dispose()
        if self._write_engine is not self._engine:
            self._write_engine.dispose()
        if self.path is not None:
            sqlite.secure_files(self.path)


def connect(url: str) -> Store:
    """A Store on `url` without touching the schema (creating an empty SQLite file if missing)."""
    path: Path | None = None
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        key = (os.getpid(), str(path))
        with _OPENING:
            if _OPEN.get(key, 0) == 0:
                # Nothing may open a damaged file (SQLite would make the damage permanent);
                # checked when this process first opens it (see _OPEN for why not again).
                sqlite_health.check_on_open(path)
                migrate.preflight(path)  # before prepare_file's chmod and the switch to WAL
                sqlite.prepare_file(path)
            # Readers keep their connections: an overflow connection is opened and closed
            # around one read, and opening one (PRAGMAs, the schema parsed again) costs more
            # than the read. A threads worker can have dozens of reads open at once (each
            # thread waits its turn for the GIL between statements); the pool only grows as
            # far as they are used.
            engine = create_engine(url, pool_size=64, max_overflow=64)
            sqlite.install_hooks(engine)
            # One thread writes at a time (the gate); its connection stays open between writes.
            writes = create_engine(url, pool_size=1, max_overflow=0)
            sqlite.install_hooks(writes)
            _OPEN[key] = _OPEN.get(key, 0) + 1
        store = Store(engine, path, writes)
        store._counted = True
        return store
    return Store(pg_engine(url) if url.startswith("postgresql") else create_engine(url), path)


def open_store(url: str, *, upgrade: bool = True) -> Store:
    """Open (creating if new) the store at `url` and bring its schema to head.

    A new database is created at head; an older one is upgraded; one that is not ours,
    newer than this code, or not a database at all is refused with a StoreError.
    """
    store = connect(url)
    try:
        guarded(store, lambda: migrate.ensure_head(store, upgrade=upgrade))
    except BaseException:
        store.close()
        raise
    if store.path is not None:
        sqlite.secure_files(store.path)
    return store


def guarded(store: Store, action: Callable[[], T]) -> T:
    """Run `action`, turning driver errors about the file itself into one-line StoreErrors."""
    try:
        return action()
    except (exc.DatabaseError, sqlite3.DatabaseError) as error:
        # A driver error raised in a connect hook reaches us unwrapped.
        where = store.path or "the database"
        cause = getattr(error, "orig", None) or error
        if sqlite.is_not_a_database(cause):
            raise StoreError(f"{where} is corrupt or not a SQLite database") from None
        raise StoreError(f"cannot use {where}: {plainly(cause, store.path)}") from None
