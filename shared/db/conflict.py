"""Inserts that lose a race gracefully: INSERT … ON CONFLICT DO NOTHING, built for each dialect.

On SQLite one writer at a time makes "look, then insert" safe; on PostgreSQL two transactions
may both look, both find nothing and both insert, and the second fails on the unique key.
A row that several writers may create at once is inserted with `InsertOrSkip`: the loser's
insert changes nothing (PostgreSQL waits for the winner's commit first) and it then takes the
path of a writer that found the row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Column, Connection, Table, bindparam
from sqlalchemy.dialects import postgresql, sqlite

from shared.db.prepared import Prepared


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
