"""Inserts that lose a race gracefully: INSERT … ON CONFLICT DO NOTHING, built for each dialect.

On SQLite one writer at a time makes "look, then insert" safe; on PostgreSQL two transactions
may both look, both find nothing and both insert, and the second fails on the unique key.
A row that several writers may create at once is inserted with `InsertOrSkip`: the loser's
insert changes nothing (PostgreSQL waits for the winner's commit first) and it then takes the
path of a writer that found the row.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from itertools import chain
from typing import Any

from sqlalchemy import Column, Connection, Table, bindparam
from sqlalchemy.dialects import postgresql, sqlite

from shared.db.prepared import Prepared

# Rows per statement of `InsertOrSkip.many` (17 columns × 64 binds stays far below SQLite's
# and PostgreSQL's limits on bound values); a statement per row count is built on first use.
MANY_ROWS = 64


class InsertOrSkip:
    """One INSERT of `columns` (values bound by name at each run) that skips a row whose
    `keys` are taken, optionally RETURNING `returning`; run on the driver's cursor
    (shared/db/prepared.py)."""

    def __init__(
        self,
        table: Table,
        columns: Sequence[str],
        keys: Sequence[str],
        returning: Sequence[Column[Any]] = (),
    ) -> None:
        self._table = table
        self._columns = tuple(columns)
        self._keys = list(keys)
        self._returning = tuple(returning)
        self._many: dict[tuple[str, int], tuple[Prepared, tuple[str, ...]]] = {}
        self._many_lock = threading.Lock()
        self._by_dialect: dict[str, Any] = {}
        for name, module in (("sqlite", sqlite), ("postgresql", postgresql)):
            stmt: Any = module.insert(table).values({c: bindparam(c) for c in columns})
            stmt = stmt.on_conflict_do_nothing(index_elements=list(keys))
            if returning:
                stmt = stmt.returning(*returning)
            self._by_dialect[name] = Prepared(stmt, dialect=name)

    def _statement(self, conn: Connection) -> Any:
        found = self._by_dialect.get(conn.dialect.name)
        if found is None:  # pragma: no cover - the store runs on these two
            raise NotImplementedError(f"no INSERT … ON CONFLICT for {conn.dialect.name}")
        return found

    def first(self, conn: Connection, params: Mapping[str, Any]) -> dict[str, Any] | None:
        """The RETURNING row of the inserted row, or None when the key was taken."""
        stmt = self._statement(conn)
        if isinstance(stmt, Prepared):
            return stmt.first(conn, params)
        row = conn.execute(stmt, dict(params)).first()
        return dict(row._mapping) if row is not None else None

    def rowcount(self, conn: Connection, params: Mapping[str, Any]) -> int:
        """1 when the row went in, 0 when the key was taken."""
        stmt = self._statement(conn)
        if isinstance(stmt, Prepared):
            return stmt.rowcount(conn, params)
        return int(conn.execute(stmt, dict(params)).rowcount)

    def many(self, conn: Connection, rows: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
        """Insert `rows` (each its values in `columns` order) with one statement per MANY_ROWS rows,
        skipping those whose keys are taken; returns the RETURNING rows of those inserted,
        in no particular order (so `returning` should name the keys)."""
        self._statement(conn)  # NotImplementedError on a dialect without one
        out: list[dict[str, Any]] = []
        for start in range(0, len(rows), MANY_ROWS):
            chunk = rows[start : start + MANY_ROWS]
            stmt, names = self._statement_for(conn.dialect.name, len(chunk))
            out.extend(stmt.all_in_order(conn, names, list(chain.from_iterable(chunk))))
        return out

    def _statement_for(self, dialect: str, rows: int) -> tuple[Prepared, tuple[str, ...]]:
        """The statement for `rows` rows, and its parameters' names, row by row."""
        found = self._many.get((dialect, rows))
        if found is None:
            names = tuple(f"{c}_{n}" for n in range(rows) for c in self._columns)
            module: Any = sqlite if dialect == "sqlite" else postgresql
            stmt: Any = module.insert(self._table).values(
                [{c: bindparam(f"{c}_{n}") for c in self._columns} for n in range(rows)]
            )
            stmt = stmt.on_conflict_do_nothing(index_elements=self._keys)
            if self._returning:
                stmt = stmt.returning(*self._returning)
            found = (Prepared(stmt, dialect=dialect), names)
            with self._many_lock:
                self._many[(dialect, rows)] = found
        return found
