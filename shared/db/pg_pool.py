"""PostgreSQL connections: the fixed pool a process keeps, and the BEGIN that opens each unit of
work and is at the same time the check that the pooled connection is still alive.

A turn on PostgreSQL is a dozen short transactions; on a 2-core box the server's CPU per turn,
not the client's, bounds the pipeline. So each transaction costs as few round trips and as
little server work as it can:

- No `pool_pre_ping`: its ping (`;`) was a round trip on every checkout. The transaction's own
  BEGIN is sent as soon as the connection is checked out (psycopg would otherwise send it before
  the first statement: a round trip either way); when it fails because the connection is dead
  (PostgreSQL restarted, the backend was terminated) that connection is thrown away and another
  checked out, up to the pool's size + 1 times, so a restart costs the caller nothing.
- Reads are `BEGIN READ ONLY … COMMIT`: a ROLLBACK makes psycopg forget every statement it has
  prepared on that connection (and DEALLOCATE ALL on the server), so ending reads with one made
  the server parse and plan the hot statements again and again. A read-only transaction cannot
  write, so its COMMIT commits nothing (and a caller that tries to write in `store.read()` gets
  an error instead of a silently discarded change).
- A fixed pool: PG_POOL_SIZE connections, no overflow. A threads worker runs dozens of turns at
  once; more backends than the server has cores to run them only adds switching and memory.
  A thread waits for a free connection (at most `pool_timeout` seconds): no code path may hold
  one connection of a Store while taking another from it (it could wait for itself).
- A write transaction its client leaves idle for WRITE_IDLE_TIMEOUT is ended by the server
  (`SET LOCAL idle_in_transaction_session_timeout`, sent with the BEGIN: no round trip of its
  own). A worker host cut off from the network in the middle of a write would otherwise keep
  its row locks (a session's route, the shared usage row) until TCP gives up on it, hours
  later, and every worker needing those rows would wait with it. No write of ours leaves its
  transaction idle for more than moments (nothing waits on a model or a platform inside one).
  Reads are not limited: they hold no row locks, and an export may stream to a slow pipe.
- A unit of work that is one statement (a receiver's turn of a key that has a route) can run
  with the connection in autocommit (`autocommitted`): PostgreSQL makes a lone statement its own
  transaction, all of it or nothing, so BEGIN and COMMIT would only add two round trips. There
  is no BEGIN to find a dead pooled connection, so the statement itself does: when it fails
  and the connection is found broken, it is thrown away and the statement sent again on
  another. The statement may have committed before the connection died (the reply lost on the
  way), so only a statement that is safe to run twice may be sent this way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, exc

T = TypeVar("T")

PG_POOL_SIZE = 15
PG_POOL_TIMEOUT = 30.0

WRITE_IDLE_TIMEOUT = "15s"

_BEGIN = f"BEGIN; SET LOCAL idle_in_transaction_session_timeout = '{WRITE_IDLE_TIMEOUT}'".encode()
_BEGIN_READ_ONLY = b"BEGIN READ ONLY"


def pg_engine(
    url: str, *, pool_size: int = PG_POOL_SIZE, pool_timeout: float = PG_POOL_TIMEOUT
) -> Engine:
    """The engine of a PostgreSQL store: `pool_size` connections at most, no overflow."""
    return create_engine(url, pool_size=pool_size, max_overflow=0, pool_timeout=pool_timeout)


@contextmanager
def transaction(engine: Engine, *, read_only: bool) -> Iterator[Connection]:
    """One transaction on a live connection of `engine`: committed on exit, rolled back on error.

    A connection whose engine was disposed meanwhile (its Store closed while this transaction
    ran: a lease renewer's, a thread's that outlived its caller) is closed, not put back: the
    disposed pool it would go back to is closed already, nothing would ever close it there, and
    psycopg would warn (ResourceWarning) whenever the collector freed it, in whatever code
    happened to run then."""
    pool = engine.pool
    conn = _begun(engine, _BEGIN_READ_ONLY if read_only else _BEGIN)
    with conn:
        try:
            with conn.begin():  # SQLAlchemy's marker only: the driver's transaction is open
                yield conn
        finally:
            if engine.pool is not pool:  # disposed (Engine.dispose puts a new pool in place)
                conn.invalidate()


def autocommitted(engine: Engine, statement: Callable[[Connection], T]) -> T:
    """`statement(conn)`, which sends exactly one statement, committed on its own: the
    connection is in autocommit (no BEGIN, no COMMIT), so that statement is its own transaction
    and a failed one writes nothing. Returns its result once committed.

    A dead pooled connection is found by the statement itself: when it fails and the connection
    is broken, that connection is discarded and the statement runs again on another (as many
    times as `transaction` would try a BEGIN). It may have committed before its connection
    died, so it must be safe to run twice (the second run finding what the first wrote)."""
    pool = engine.pool
    last: Exception | None = None
    for _ in range(_pool_size(engine) + 1):
        # SQLAlchemy sets psycopg's `autocommit` (client side, no round trip) and puts the
        # connection back to its default when it returns to the pool.
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            try:
                return statement(conn)
            except exc.DBAPIError as error:
                if not _broken(conn, error):
                    raise
                last = error
            finally:
                if engine.pool is not pool:  # disposed meanwhile (see `transaction`)
                    conn.invalidate()
    assert last is not None
    raise last


def _broken(conn: Connection, error: exc.DBAPIError) -> bool:
    """Whether `error` left `conn` dead (then invalidated here: never back into the pool).
    Statements run on psycopg's own cursor (prepared.py) raise without SQLAlchemy having
    looked at the connection, so its state is read here as `_send_begin` reads it."""
    if error.connection_invalidated or conn.invalidated:
        return True
    if conn.dialect.driver != "psycopg":
        return False
    from psycopg import pq

    pgconn = getattr(conn.connection.driver_connection, "pgconn", None)
    if pgconn is None or pgconn.status == pq.ConnStatus.OK:
        return False
    conn.invalidate(error.orig)
    return True


def _begun(engine: Engine, begin: bytes) -> Connection:
    """A connection checked out of `engine` with `begin` sent on it; dead ones are discarded."""
    last: Exception | None = None
    for _ in range(_pool_size(engine) + 1):
        conn = engine.connect()
        try:
            _send_begin(conn, begin)
        except exc.DBAPIError as error:
            conn.close()
            if not error.connection_invalidated:
                raise
            last = error
            continue
        except BaseException:
            conn.close()
            raise
        return conn
    assert last is not None
    raise last


def _pool_size(engine: Engine) -> int:
    size = getattr(engine.pool, "size", None)
    return int(size()) if callable(size) else 1


def _send_begin(conn: Connection, begin: bytes) -> None:
    """BEGIN on the driver's connection, as the driver itself would send it before the first
    statement (psycopg then sees the transaction open and sends no BEGIN of its own). Any
    other driver gets its BEGIN on the first statement, as before."""
    raw: Any = conn.connection.driver_connection
    pgconn = getattr(raw, "pgconn", None)
    if pgconn is None or conn.dialect.driver != "psycopg":
        return
    import psycopg
    from psycopg import pq

    try:
        result = pgconn.exec_(begin)
        if result.status != pq.ExecStatus.COMMAND_OK:
            message = (result.error_message or pgconn.error_message).decode(errors="replace")
            raise psycopg.OperationalError(message.strip() or "BEGIN failed")
    except psycopg.Error as error:
        dead = pgconn.status != pq.ConnStatus.OK
        if dead:
            conn.invalidate(error)
        raise exc.DBAPIError.instance(
            begin.decode(),
            None,
            error,
            psycopg.Error,
            dialect=conn.dialect,
            connection_invalidated=dead,
        ) from error
