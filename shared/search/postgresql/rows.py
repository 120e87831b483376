"""PostgreSQL reads of the rows search results are made of: messages around an anchor, bookends,
sessions, parents, recent sessions: the driver connection, its marks and the visibility
clause compiled for this dialect; the reads are `shared.search.reads`.

They use the DB-API cursor under the SQLAlchemy connection (same transaction): SQLAlchemy's
statement machinery costs ~60 µs a query against ~7 µs for these indexed queries themselves,
and a scroll is a handful of them within a 2 ms budget.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, cast

import psycopg
from sqlalchemy import Connection
from sqlalchemy.dialects import postgresql as postgresql_dialect

from shared.db import schema
from shared.search.reads import Reads
from shared.store.visibility import Viewer, reach


def db_of(conn: Connection) -> psycopg.Connection[Any]:
    """The driver connection under `conn` (same transaction, no statement compilation)."""
    return cast(psycopg.Connection[Any], conn.connection.driver_connection)


def marks(values: Sequence[object]) -> str:
    return ", ".join("%s" for _ in values)


def visible(viewer: Viewer | None, sessions: str, params: list[object]) -> str:
    """` AND ...` keeping the sessions (table alias `sessions`) `viewer` reaches, with its
    values appended to `params`; "" when nothing is held back. The condition is
    `shared.store.visibility.reach`, compiled for PostgreSQL."""
    sql, values = _compiled_reach(viewer, sessions)
    params.extend(values)
    return sql


@functools.lru_cache(maxsize=1024)
def _compiled_reach(viewer: Viewer | None, alias: str) -> tuple[str, tuple[object, ...]]:
    """Compiling costs ~1 ms; a viewer's condition is the same text every time."""
    clause = reach(viewer, schema.sessions.alias(alias))
    if clause is None:
        return "", ()
    format_style = postgresql_dialect.dialect(paramstyle="format")  # type: ignore[no-untyped-call]
    compiled = clause.compile(dialect=format_style)
    return f" AND {compiled}", tuple(compiled.params[name] for name in compiled.positiontup or ())


# The reads themselves are shared with the other dialect (shared.search.reads).
READS = Reads(db_of, visible, "%s")
message = READS.message
around = READS.around
ends = READS.ends
sessions_by_id = READS.sessions_by_id
parents = READS.parents
filter_sql = READS.filter_sql
recent_sessions = READS.recent_sessions
first_text = READS.first_text
count_between = READS.count_between
