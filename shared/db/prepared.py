"""Hot statements compiled once and run on the driver's cursor of the caller's transaction.

A turn runs about twenty statements, most of them while holding SQLite's single write lock.
Through `Connection.execute` each costs ~40 µs of Python around ~8 µs of SQLite (parameter
processing, result wrapping, events); the write lock is the pipeline's bottleneck, so on SQLite
these statements go straight to the sqlite3 cursor with the SQL SQLAlchemy compiled for them.
Only plain Integer/Float/Text values pass through (checked at compile time: nothing to convert).
Other databases take the ordinary SQLAlchemy path with the same statement.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from typing import Any, cast

from sqlalchemy import Connection, exc
from sqlalchemy.dialects import sqlite
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ClauseElement, Executable

Params = Mapping[str, Any]
# (the driver's cursor, or None and Core's result) -> what the caller asked for
Fetch = Callable[[sqlite3.Cursor | None, Any], Any]

_NAMED_SQLITE = sqlite.dialect(paramstyle="named")


class Prepared:
    """One Core statement (built once, values bound by name at each run)."""

    def __init__(self, statement: Executable) -> None:
        self.statement = statement
        compiled = cast(SQLCompiler, cast(ClauseElement, statement).compile(dialect=_NAMED_SQLITE))
        # Float's only conversion, int -> float, is one SQLite makes itself in a REAL column
        # (and comparisons between the two are numeric); any other would need running here.
        converting = [
            name
            for name, convert in compiled._bind_processors.items()
            if getattr(convert, "__name__", "") != "to_float"
        ]
        if converting:
            raise TypeError(f"{converting} need converting; run this statement through Core")
        self._sql = compiled.string
        # Values fixed in the statement itself (`.values(status="running")`) are binds too.
        self._fixed = {
            name: bind.value
            for name, bind in compiled.binds.items()
            if not bind.required and bind.callable is None
        }
        columns = getattr(statement, "selected_columns", None)
        returning = getattr(statement, "_returning", ())
        self.columns: tuple[str, ...] = tuple(
            c.key for c in (columns if columns is not None and len(columns) else returning)
        )

    def _run(self, conn: Connection, params: Params, fetch: Fetch) -> Any:
        raw = conn.connection.driver_connection
        if not isinstance(raw, sqlite3.Connection):
            return fetch(None, conn.execute(self.statement, dict(params)))
        values = {**self._fixed, **params} if self._fixed else params
        try:
            cursor = raw.execute(self._sql, values)
            try:
                return fetch(cursor, None)
            finally:
                cursor.close()
        except sqlite3.Error as error:  # as Core would raise it: callers catch SQLAlchemy's
            raise exc.DBAPIError.instance(
                self._sql, dict(values), error, sqlite3.Error, dialect=conn.dialect
            ) from error

    def rowcount(self, conn: Connection, params: Params) -> int:
        return int(self._run(conn, params, lambda cur, res: cur.rowcount if cur else res.rowcount))

    def first(self, conn: Connection, params: Params) -> dict[str, Any] | None:
        def fetch(cursor: sqlite3.Cursor | None, result: Any) -> dict[str, Any] | None:
            if cursor is None:
                row = result.first()
                return dict(row._mapping) if row is not None else None
            found = cursor.fetchone()
            return dict(zip(self.columns, found, strict=True)) if found is not None else None

        return self._run(conn, params, fetch)  # type: ignore[no-any-return]

    def all(self, conn: Connection, params: Params) -> list[dict[str, Any]]:
        def fetch(cursor: sqlite3.Cursor | None, result: Any) -> list[dict[str, Any]]:
            if cursor is None:
                return [dict(row._mapping) for row in result.all()]
            names = self.columns
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

        return self._run(conn, params, fetch)  # type: ignore[no-any-return]

    def scalar(self, conn: Connection, params: Params) -> Any:
        """The first column of the first row (None when there is no row)."""

        def fetch(cursor: sqlite3.Cursor | None, result: Any) -> Any:
            if cursor is None:
                return result.scalar()
            found = cursor.fetchone()
            return found[0] if found is not None else None

        return self._run(conn, params, fetch)
