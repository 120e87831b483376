"""Hot statements compiled once and run on the driver's cursor of the caller's transaction.

A turn runs about twenty statements, most of them while holding SQLite's single write lock.
Through `Connection.execute` each costs ~40 µs of Python around ~8 µs of SQLite (parameter
processing, result wrapping, events); the write lock is the pipeline's bottleneck, so on SQLite
these statements go straight to the sqlite3 cursor with the SQL SQLAlchemy compiled for them.
Only plain Integer/Float/Text values pass through (checked at compile time: nothing to convert).

PostgreSQL through psycopg does the same: there a turn's statements are round trips, and
SQLAlchemy's ~40 µs around each was a quarter of a receiver's CPU per request on PostgreSQL
(bench/webhooks.py). The SQL is compiled once for the psycopg dialect, run on the psycopg
connection inside the caller's transaction (psycopg prepares it server-side after a few runs),
and its errors raised as Core would raise them, through psycopg's raw cursor with the
placeholders numbered once here. Other drivers take the ordinary path.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Connection, exc
from sqlalchemy.dialects import sqlite
from sqlalchemy.dialects.postgresql import psycopg as pg_psycopg
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ClauseElement, Executable

Params = Mapping[str, Any]
# (the driver's cursor, or None and Core's result) -> what the caller asked for
Fetch = Callable[[sqlite3.Cursor | None, Any], Any]

_NAMED_SQLITE = sqlite.dialect(paramstyle="named")
_QMARK_SQLITE = sqlite.dialect(paramstyle="qmark")
_PSYCOPG = pg_psycopg.dialect()  # type: ignore[no-untyped-call]  # pyformat: %(name)s


_PYFORMAT = re.compile(r"%\(([^)]+)\)s|%%")


@dataclass(frozen=True, slots=True)
class _ForPsycopg:
    """A statement as psycopg's raw cursor takes it: `$n` placeholders, the value of `names[n-1]`
    bound to each. psycopg would otherwise parse the `%(name)s` form at every run (it keeps
    what it parsed only for statements of up to 4 kB; a turn's usage statement is 8 kB)."""

    sql: str
    names: tuple[str, ...]
    fixed: dict[str, Any]

    def args(self, params: Params) -> list[Any]:
        fixed = self.fixed
        return [params[n] if n in params else fixed[n] for n in self.names]


def _numbered(sql: str) -> tuple[str, tuple[str, ...]]:
    """`sql` with its `%(name)s` binds as `$n` (a name bound twice is one `$n`) and `%%` as `%`."""
    names: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "%"
        return f"${names.setdefault(name, len(names) + 1)}"

    return _PYFORMAT.sub(number, sql), tuple(names)


def _compiled_for_psycopg(statement: Executable) -> _ForPsycopg | None:
    """The statement's SQL for psycopg and the values fixed in it, or None when some value
    needs converting on the way in (that statement then runs through Core) or it does not
    compile for PostgreSQL (a SQLite-only form)."""
    try:
        compiled = cast(SQLCompiler, cast(ClauseElement, statement).compile(dialect=_PSYCOPG))
    except Exception:  # a SQLite-only form (sqlite.insert's ON CONFLICT) runs through Core
        return None
    if compiled._bind_processors:
        return None
    fixed = {
        compiled.bind_names[bind]: bind.value
        for bind in compiled.bind_names
        if not bind.required and bind.callable is None
    }
    sql, names = _numbered(compiled.string)
    return _ForPsycopg(sql, names, fixed)


class Prepared:
    """One Core statement (built once, values bound by name at each run)."""

    def __init__(self, statement: Executable, *, dialect: str | None = None) -> None:
        """`dialect`: the one dialect a dialect-specific statement (an INSERT … ON CONFLICT
        built with `sqlite.insert` or `postgresql.insert`) is for; None for both."""
        self.statement = statement
        self._pg = _compiled_for_psycopg(statement) if dialect != "sqlite" else None
        self._sql: str | None = None
        self._fixed: dict[str, Any] = {}
        # `all_in_order`: for the names last given, the SQL with `?` binds and their order
        self._by_position: tuple[Sequence[str], str, tuple[int, ...] | None] | None = None
        if dialect != "postgresql":
            self._compile_for_sqlite(statement)
        columns = getattr(statement, "selected_columns", None)
        returning = getattr(statement, "_returning", ())
        self.columns: tuple[str, ...] = tuple(
            c.key for c in (columns if columns is not None and len(columns) else returning)
        )

    def _compile_for_sqlite(self, statement: Executable) -> None:
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

    def _run(self, conn: Connection, params: Params, fetch: Fetch) -> Any:
        raw = conn.connection.driver_connection
        if not isinstance(raw, sqlite3.Connection) or self._sql is None:
            if self._pg is not None and conn.dialect.driver == "psycopg":
                return self._run_psycopg(conn, raw, params, fetch)
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

    def _run_psycopg(self, conn: Connection, raw: Any, params: Params, fetch: Fetch) -> Any:
        import psycopg

        assert self._pg is not None
        sql, args = self._pg.sql, self._pg.args(params)
        cursor: Any = psycopg.RawCursor(raw)  # typed for sqlite3's: fetch reads both alike
        try:
            with cursor:
                cursor.execute(sql, args)
                return fetch(cursor, None)
        except psycopg.Error as error:  # as Core would raise it: callers catch SQLAlchemy's
            raise exc.DBAPIError.instance(
                sql, args, error, psycopg.Error, dialect=conn.dialect
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

    def first_each(self, conn: Connection, params_seq: list[Params]) -> list[dict[str, Any] | None]:
        """`first` for each of `params_seq`, in order. On psycopg all are sent at once (a
        pipeline: one round trip for the lot instead of one each)."""
        raw: Any = conn.connection.driver_connection
        if self._pg is None or conn.dialect.driver != "psycopg" or len(params_seq) < 2:
            return [self.first(conn, params) for params in params_seq]
        import psycopg

        sql = self._pg.sql
        values = [self._pg.args(params) for params in params_seq]
        found: list[dict[str, Any] | None] = []
        try:
            with psycopg.RawCursor(raw) as cursor:
                cursor.executemany(sql, values, returning=True)
                while True:  # one result per parameter set, in order
                    row = cursor.fetchone()
                    found.append(dict(zip(self.columns, row, strict=True)) if row else None)
                    if not cursor.nextset():
                        break
        except psycopg.Error as error:  # as Core would raise it: callers catch SQLAlchemy's
            raise exc.DBAPIError.instance(
                sql, None, error, psycopg.Error, dialect=conn.dialect
            ) from error
        if len(found) != len(params_seq):  # pragma: no cover - psycopg gives one per set
            raise RuntimeError(f"{len(found)} results for {len(params_seq)} statements")
        return found

    def all(self, conn: Connection, params: Params) -> list[dict[str, Any]]:
        def fetch(cursor: sqlite3.Cursor | None, result: Any) -> list[dict[str, Any]]:
            if cursor is None:
                return [dict(row._mapping) for row in result.all()]
            names = self.columns
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

        return self._run(conn, params, fetch)  # type: ignore[no-any-return]

    def rows(self, conn: Connection, params: Params) -> list[tuple[Any, ...]]:
        """`all` as tuples, in the statement's column order (`columns`): for a caller that
        reads by position, without a dict built per row."""

        def fetch(cursor: sqlite3.Cursor | None, result: Any) -> list[tuple[Any, ...]]:
            if cursor is None:
                return [tuple(row) for row in result.all()]
            return list(cursor.fetchall())

        return self._run(conn, params, fetch)  # type: ignore[no-any-return]

    def all_in_order(
        self, conn: Connection, names: Sequence[str], values: Sequence[Any]
    ) -> list[dict[str, Any]]:
        """`all` with the values of `names` given in that order (a multi-row INSERT's binds).
        On SQLite they are bound by position: by name, the driver looks each of a statement's
        names up in a list of them all, which for a few hundred binds costs more than the
        INSERT (and a dict of them must be built first)."""
        raw = conn.connection.driver_connection
        if not isinstance(raw, sqlite3.Connection) or self._sql is None:
            return self.all(conn, dict(zip(names, values, strict=True)))
        sql, order = self._positional(names)
        if self._fixed:  # values fixed in the statement come after the caller's
            values = [*values, *self._fixed.values()]
        bound = values if order is None else [values[index] for index in order]
        try:
            cursor = raw.execute(sql, bound)
            try:
                rows = cursor.fetchall()
            finally:
                cursor.close()
        except sqlite3.Error as error:  # as Core would raise it: callers catch SQLAlchemy's
            raise exc.DBAPIError.instance(
                sql, list(bound), error, sqlite3.Error, dialect=conn.dialect
            ) from error
        return [dict(zip(self.columns, row, strict=True)) for row in rows]

    def _positional(self, names: Sequence[str]) -> tuple[str, tuple[int, ...] | None]:
        """The statement's SQL with `?` binds, and where each bind's value is in `names`
        (None when in the same order). Worked out once for the names given (a caller keeps
        passing the same ones), again only if other names come."""
        found = self._by_position
        if found is None or (found[0] is not names and tuple(found[0]) != tuple(names)):
            compiled = cast(
                SQLCompiler, cast(ClauseElement, self.statement).compile(dialect=_QMARK_SQLITE)
            )
            index = {name: n for n, name in enumerate([*names, *self._fixed])}
            binds = compiled.positiontup or []
            if not set(index).issuperset(binds) or not set(binds).issuperset(names):
                raise ValueError(f"values for {list(names)}, binds {list(binds)}")
            order = tuple(index[name] for name in binds)  # a name used twice is bound twice
            identity = order == tuple(range(len(index)))
            found = self._by_position = (names, compiled.string, None if identity else order)
        return found[1], found[2]

    def scalar(self, conn: Connection, params: Params) -> Any:
        """The first column of the first row (None when there is no row)."""

        def fetch(cursor: sqlite3.Cursor | None, result: Any) -> Any:
            if cursor is None:
                return result.scalar()
            found = cursor.fetchone()
            return found[0] if found is not None else None

        return self._run(conn, params, fetch)
