"""Group commit: a process's writers that queue for SQLite's write lock share one transaction.

SQLite has one writer at a time, and in a busy worker most of a short write is fixed cost:
queueing for the lock, BEGIN, and the COMMIT that appends every page the write touched to the
WAL (a turn's commit rewrites the same inbox, routes and outbox pages as the turn before it).
So while writers are waiting, the open transaction goes on to the next one instead of being
committed, and one COMMIT ends the group (PostgreSQL, MySQL and most databases do the same).
Each unit of work still runs alone, in order, inside its own SAVEPOINT:

- a unit's writes are seen by the units after it, exactly as if each had committed in turn;
- a unit that raises is rolled back to its savepoint and raises; the others are untouched;
- a unit returns only after its group's COMMIT, so nothing is reported written before it is;
  if the COMMIT fails (or SQLite drops the transaction), every unit of the group raises.

Two kinds of unit. `unit()` is a `with` block run by its own thread: the thread holding the
transaction hands it over to the next one. `run(fn)` passes a function instead, and whichever
thread holds the transaction runs it (flat combining): no thread switch per unit, which under
load costs more than the unit itself. Such functions must not depend on which thread runs them.

A group ends when nobody is waiting, at `max_units` units or after `max_seconds`, so the file
lock also passes between processes. Across processes the lock is an exclusive flock of
`<state.db>-writer.lock`, handed over at once on release where SQLite's busy handler would
poll with growing sleeps. A process that dies holding it loses it with its descriptors; the
flock is a courtesy among hermes processes, SQLite's own lock still guards the file.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, RootTransaction
from sqlalchemy.exc import OperationalError

from shared.db import sqlite

T = TypeVar("T")

MAX_UNITS = 64
MAX_SECONDS = 0.025
_SAVEPOINT = "hermes_unit"


class GroupFailed(OperationalError):
    """The group's transaction was lost (its COMMIT failed, or SQLite rolled it back)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(None, None, cause)


class _Job:
    """A function waiting to run in a group, and what came of it."""

    __slots__ = ("error", "finished", "fn", "result")

    def __init__(self, fn: Callable[[Connection], Any]) -> None:
        self.fn = fn
        self.result: Any = None
        self.error: BaseException | None = None
        self.finished = threading.Event()  # its group ended (or it failed on its own)


class _Group:
    __slots__ = ("conn", "done", "error", "jobs", "outer", "raw", "started", "units")

    def __init__(self, conn: Connection, outer: RootTransaction) -> None:
        self.conn = conn
        self.outer = outer
        self.raw: Any = conn.connection.driver_connection
        self.units = 0
        self.started = time.monotonic()
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.jobs: list[_Job] = []


class GroupCommit:
    """Write transactions for one process on one SQLite file (see the module docstring)."""

    def __init__(
        self,
        lock_path: Path,
        connect: Callable[[], Connection],
        *,
        max_units: int = MAX_UNITS,
        max_seconds: float = MAX_SECONDS,
    ) -> None:
        self._lock_path = lock_path
        self._connect = connect
        self._max_units = max_units
        self._max_seconds = max_seconds
        self._cond = threading.Condition(threading.Lock())
        self._busy = False  # a thread holds the turn (runs units, or starts or ends a group)
        self._queued = 0  # `unit()` callers waiting for the turn
        self._jobs: deque[_Job] = deque()  # `run()` functions waiting for whoever has the turn
        self._group: _Group | None = None  # the open group, between units
        self._local = threading.local()
        self._fd: int | None = None
        self._pid = 0
        # The writers' connection, kept from one group to the next (the turn's holder uses it):
        # checking it out of the pool and back in for every group cost more than its BEGIN.
        self._conn: Connection | None = None
        self._conn_pid = 0

    # --- the two ways in ---

    @contextmanager
    def unit(self) -> Iterator[Connection]:
        """One unit of work in the current group (or a new one); exits once it is committed."""
        self._enter()
        try:
            with self._cond:
                self._queued += 1
                try:
                    while self._busy:
                        self._cond.wait()
                finally:
                    self._queued -= 1
                self._busy = True
                group = self._group
            group = group or self._open()
            if not self._savepoint(group):
                self._carry_on(group)
                assert group.error is not None
                raise GroupFailed(group.error) from group.error
            try:
                yield group.conn
            except BaseException as exc:
                self._undo(group, exc)
                self._carry_on(group)
                raise
            self._release_savepoint(group)
            self._carry_on(group)
        finally:
            self._local.inside = False
        group.done.wait()
        if group.error is not None:
            raise GroupFailed(group.error) from group.error

    def run(self, fn: Callable[[Connection], T]) -> T:
        """`fn(conn)` as one unit of work, run by whichever thread holds the transaction;
        returns its result once its group committed (or raises what it raised)."""
        self._enter()
        job = _Job(fn)
        try:
            with self._cond:
                mine = not self._busy
                if mine:
                    self._busy = True
                    group = self._group
                else:
                    self._jobs.append(job)
            if mine:
                group = group or self._open()
                self._run_job(group, job)
                self._carry_on(group)
        finally:
            self._local.inside = False
        job.finished.wait()
        if job.error is not None:
            raise job.error
        return job.result  # type: ignore[no-any-return]

    def run_many(self, fns: Sequence[Callable[[Connection], T]]) -> list[T | Exception]:
        """Each of `fns` as its own unit of work, in order, queued at once (one thread hop
        for all); returns each result or the exception it raised, once its group committed.
        A lost group is a GroupFailed for each of its units."""
        self._enter()
        jobs = [_Job(fn) for fn in fns]
        try:
            with self._cond:
                mine = not self._busy
                if mine:
                    self._busy = True
                    group = self._group
                self._jobs.extend(jobs)
            if mine:
                try:
                    group = group or self._open()
                except Exception:  # _open failed every waiting function, ours too
                    group = None
                if group is not None:
                    self._carry_on(group)
        finally:
            self._local.inside = False
        outcomes: list[T | Exception] = []
        for job in jobs:
            job.finished.wait()
            error = job.error
            if error is not None and not isinstance(error, Exception):
                raise error  # KeyboardInterrupt, SystemExit: not one unit's failure
            outcomes.append(error if error is not None else job.result)
        return outcomes

    # --- inside ---

    def _enter(self) -> None:
        if getattr(self._local, "inside", False):
            raise RuntimeError("store.write() inside store.write(): one transaction per thread")
        self._local.inside = True

    def close(self) -> None:
        """Let the lock file's descriptor go (the store is closed; a later write opens it
        again). Left open, every store a long-lived process opened and closed kept one, until
        descriptors ran past what select() takes (the test suite's did, at 1,024)."""
        with self._cond:
            if self._busy:
                return
            if self._conn is not None and self._conn_pid == os.getpid():
                self._conn.close()
            self._conn = None
            if self._fd is not None and self._pid == os.getpid():
                os.close(self._fd)
                self._fd = None

    def _descriptor(self) -> int:
        if self._fd is None or self._pid != os.getpid():
            self._fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._pid = os.getpid()
        return self._fd

    def _connection(self) -> Connection:
        """With the turn: the writers' connection (a new one after a fork or a lost group)."""
        conn = self._conn
        if conn is None or self._conn_pid != os.getpid() or conn.closed or conn.invalidated:
            conn = self._conn = self._connect()
            self._conn_pid = os.getpid()
        return conn

    def _let_go(self) -> None:
        """With the turn: close the writers' connection (it failed; the next group opens one)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _open(self) -> _Group:
        """With the turn: take the file lock and BEGIN IMMEDIATE on the writers' connection.
        If that fails the turn is let go and the functions waiting for it fail too."""
        locked = False
        try:
            fcntl.flock(self._descriptor(), fcntl.LOCK_EX)
            locked = True
            conn = self._connection()
            return _Group(conn, conn.begin())
        except BaseException as exc:
            self._let_go()
            if locked:
                fcntl.flock(self._descriptor(), fcntl.LOCK_UN)
            with self._cond:
                waiting, self._jobs = list(self._jobs), deque()
                self._busy = False
                self._cond.notify()
            for job in waiting:
                job.error = exc
                job.finished.set()
            raise

    def _savepoint(self, group: _Group) -> bool:
        """Open the next unit's savepoint; False (and the group lost) if SQLite refuses."""
        try:
            sqlite.savepoint(group.raw, _SAVEPOINT)
        except BaseException as exc:
            group.error = exc
            return False
        return True

    def _run_job(self, group: _Group, job: _Job) -> None:
        if not self._savepoint(group):
            group.jobs.append(job)  # fails with the group
            return
        try:
            job.result = job.fn(group.conn)
        except BaseException as exc:
            self._undo(group, exc)
            job.error = exc
            job.finished.set()
            return
        group.jobs.append(job)
        self._release_savepoint(group)

    def _release_savepoint(self, group: _Group) -> None:
        try:
            sqlite.release_savepoint(group.raw, _SAVEPOINT)
            group.units += 1
        except BaseException as exc:
            group.error = exc

    def _undo(self, group: _Group, cause: BaseException) -> None:
        """Roll a failed unit back to its savepoint; if SQLite dropped the whole transaction
        (a full disk, an I/O error), the group is lost."""
        try:
            if not group.raw.in_transaction:
                raise cause
            sqlite.rollback_to_savepoint(group.raw, _SAVEPOINT)
        except BaseException as exc:
            group.error = exc

    def _carry_on(self, group: _Group) -> None:
        """After a unit: run the waiting functions, hand the transaction to a waiting `unit()`,
        or end the group (and start another if functions are still waiting)."""
        while True:
            with self._cond:
                room = (
                    group.error is None
                    and group.units < self._max_units
                    and time.monotonic() - group.started < self._max_seconds
                )
                job = self._jobs.popleft() if room and self._jobs else None
                if job is None and room and self._queued:
                    self._group = group
                    self._busy = False
                    self._cond.notify()
                    return
                if job is None:
                    self._group = None
            if job is not None:
                self._run_job(group, job)
                continue
            self._end(group)
            with self._cond:
                if not self._jobs:
                    self._busy = False
                    self._cond.notify()
                    return
            try:
                group = self._open()
            except BaseException:  # the waiting functions got the error; ours is committed
                return

    def _end(self, group: _Group) -> None:
        """COMMIT (or roll back a lost group), let the file lock go, wake the group's units."""
        try:
            if group.error is None:
                group.outer.commit()
            else:
                group.outer.rollback()
        except BaseException as exc:
            group.error = group.error or exc
        finally:
            try:
                if group.error is not None:  # whatever state it was left in goes with it
                    self._let_go()
            finally:
                fcntl.flock(self._descriptor(), fcntl.LOCK_UN)
                for job in group.jobs:
                    if group.error is not None:
                        job.error = GroupFailed(group.error)
                    job.finished.set()
                group.done.set()
