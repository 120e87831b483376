"""`hermes db copy`: a whole store, table by table, into an empty SQLite file or PostgreSQL.

The one place that writes every table: like a migration it moves rows as they are, so no
owning module's rules run (a copied session keeps its counters, a copied turn its status).

- The list of tables is the schema's metadata (`shared.db.schema`), in foreign-key order, so a
  table added there is copied without a change here. Search indexes are not in it: they are
  derived, and each dialect's triggers and DDL rebuild them as the rows arrive. A table marked
  `info={"derived": True}` is skipped the same way.
- Rows stream in batches (`yield_per`: a server-side cursor on PostgreSQL) inside one read
  snapshot of the source and one write transaction on the target: a copy that fails or is
  killed commits nothing, so the target stays empty and a rerun starts over. A SQLite target
  is built beside its name and linked into place only once complete and checked.
- Counters are the source's whatever keeps them on the target (triggers, or none): message
  counts are set back to the source's values after the messages went in and compared before
  the commit, as is every table's row count. `source_stats` is derived: a SQLite target's
  triggers build it from the sessions copied (a PostgreSQL store sums sessions instead).
  Serial ids are advanced past the source's high-water mark.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Column,
    Connection,
    Table,
    bindparam,
    func,
    inspect,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError

from shared.db import migrate, postgresql, sqlite
from shared.db.engine import Store, connect, guarded, open_store
from shared.db.errors import StoreError
from shared.db.schema import metadata, sessions
from shared.db.sqlite_care import check_store

BATCH_ROWS = 2000
# Tables whose rows the target's triggers may create while others are copied: cleared, then
# written from the source after everything else. (None today: source_stats is derived.)
REWRITTEN_LAST: tuple[Table, ...] = ()
# Columns kept by triggers on the target (a message insert counts itself): set back to the
# source's values once the rows they count are in.
COUNTERS: tuple[tuple[Table, str], ...] = ((sessions, "message_count"),)

OnTable = Callable[[str, int], None]
OnRows = Callable[[str, int], None]


@dataclass(frozen=True)
class Copied:
    target: str  # the target's URL, password hidden
    rows: dict[str, int]  # per table, in copy order
    seconds: float

    @property
    def total(self) -> int:
        return sum(self.rows.values())


def tables_to_copy() -> list[Table]:
    """Every table of the schema in foreign-key order, the rewritten-last ones at the end."""
    last = {table.name for table in REWRITTEN_LAST}
    ordered = [t for t in metadata.sorted_tables if not t.info.get("derived")]
    return [t for t in ordered if t.name not in last] + [t for t in ordered if t.name in last]


def shown(url: str) -> str:
    """A URL as it may be printed: the password hidden."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url.split("@")[-1]


def parse_target(url: str) -> URL:
    """The target's URL; StoreError for a scheme hermes cannot store in."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise StoreError(
            f"{url!r} is not a database URL; use sqlite:///PATH or postgresql://HOST/DB"
        ) from None
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise StoreError(
            f"cannot copy to {backend!r} URLs; use sqlite:///PATH or postgresql://HOST/DB"
        )
    if backend == "sqlite" and not parsed.database:
        raise StoreError("a SQLite target needs a file: sqlite:///PATH (in-memory is lost)")
    if backend == "postgresql" and not parsed.database:
        raise StoreError(f"{shown(url)} names no database; use postgresql://HOST/DB")
    return parsed


def _same_database(source: Store, source_url: str, target: URL) -> bool:
    if target.get_backend_name() == "sqlite":
        if source.path is None or target.database is None:
            return False
        return Path(target.database).resolve() == source.path.resolve()
    if source.path is not None:
        return False
    mine = make_url(source_url)

    def where(url: URL) -> tuple[Any, ...]:
        return (url.host or "localhost", url.port or 5432, url.database, sorted(url.query.items()))

    return where(mine) == where(target)


def copy_store(
    source: Store,
    source_url: str,
    target_url: str,
    *,
    batch: int = BATCH_ROWS,
    on_table: OnTable = lambda _name, _total: None,
    on_rows: OnRows = lambda _name, _rows: None,
) -> Copied:
    """Copy `source` (at head) into the empty database at `target_url`; StoreError, changing
    nothing, for a bad, unreachable, non-empty or same target or a row the target refuses."""
    target = parse_target(target_url)
    if _same_database(source, source_url, target):
        raise StoreError(f"{shown(target_url)} is the store being copied; name another target")
    started = time.perf_counter()
    if target.get_backend_name() == "sqlite":
        rows = _copy_to_sqlite(source, Path(str(target.database)), batch, on_table, on_rows)
    else:
        rows = _copy_to_server(source, target_url, batch, on_table, on_rows)
    return Copied(shown(target_url), rows, time.perf_counter() - started)


# --- the targets ---


def _copy_to_sqlite(
    source: Store, path: Path, batch: int, on_table: OnTable, on_rows: OnRows
) -> dict[str, int]:
    if path.exists() and (path.is_dir() or path.stat().st_size > 0):
        raise StoreError(f"{path} already exists and is not empty; copy into a new file")
    _remove_abandoned(path)
    partial = path.with_name(f".{path.name}.copying-{os.getpid()}")
    try:
        target = open_store(f"sqlite:///{partial}")
        try:
            rows = _copy(source, target, batch, on_table, on_rows)
            problems = _sqlite_findings(target)
        finally:
            target.close()
        if problems:
            raise StoreError(f"the copy failed its check ({problems[0]}); {path} was not made")
        try:
            os.link(partial, path)  # never over a file that appeared meanwhile
        except FileExistsError:
            raise StoreError(f"{path} appeared during the copy; it was left alone") from None
        except OSError as error:
            raise StoreError(f"cannot create {path}: {error.strerror or error}") from None
        return rows
    finally:
        for leftover in (partial, Path(f"{partial}-wal"), Path(f"{partial}-shm")):
            leftover.unlink(missing_ok=True)
        Path(f"{partial}-writer.lock").unlink(missing_ok=True)


def _remove_abandoned(path: Path) -> None:
    """Partial files (and their -wal, -shm) of copies to `path` whose process is gone."""
    prefix = f".{path.name}.copying-"
    for found in path.parent.glob(f"{prefix}*"):
        pid = found.name.removeprefix(prefix).split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            found.unlink(missing_ok=True)
        except PermissionError:
            continue  # another user's process


def _sqlite_findings(store: Store) -> list[str]:
    # The counters were compared with the source's already: they are the source's, even where
    # the source's disagree with its rows (`hermes db check` on either says so).
    return guarded(store, lambda: check_store(store, counters=False))


def _copy_to_server(
    source: Store, url: str, batch: int, on_table: OnTable, on_rows: OnRows
) -> dict[str, int]:
    where = shown(url)
    probe = connect(url)
    try:
        try:
            with probe.read() as conn:
                _rev, present = migrate.current_revision(conn)
                migrate.schema_status(conn, where)  # foreign or too new: refused, untouched
                held = _rows_held(conn, present)
        except DBAPIError as error:
            cause = str(error.orig or error).strip().splitlines()[0]
            raise StoreError(f"cannot use {where}: {cause}") from None
    finally:
        probe.close()
    if held:
        raise StoreError(_not_empty(where, held))
    target = open_store(url)  # brings an empty database to head (the migrations' own lock)
    try:
        copied = _copy(source, target, batch, on_table, on_rows)
        with target.write() as conn:  # the copy's keys in, not left to the fleet's first turns
            postgresql.flush_pending_lists(conn)
        return copied
    finally:
        target.close()


def _rows_held(conn: Connection, present: Sequence[str]) -> dict[str, int]:
    """Our tables present in the target that hold rows: {name: rows} (a few counted)."""
    held: dict[str, int] = {}
    for table in tables_to_copy():
        if table.name in present and conn.execute(select(select(table).exists())).scalar():
            held[table.name] = _count(conn, table)
    return held


def _count(conn: Connection, table: Table) -> int:
    return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def _not_empty(where: str, held: dict[str, int]) -> str:
    listed = ", ".join(f"{rows:,} {name}" for name, rows in list(held.items())[:3])
    return f"{where} is not empty (it holds {listed}); copy only into an empty database"


# --- the copy itself ---


def _copy(
    source: Store, target: Store, batch: int, on_table: OnTable, on_rows: OnRows
) -> dict[str, int]:
    where = str(target.path or "the target")
    tables = tables_to_copy()
    with source.read() as src:
        counts = {t.name: _count(src, t) for t in tables}
        try:
            with target.write() as dst:
                held = _rows_held(dst, inspect(dst).get_table_names())
                if held:  # filled between the look and the write
                    raise StoreError(_not_empty(where, held))
                for table in tables:
                    if table in REWRITTEN_LAST:
                        continue
                    _copy_table(src, dst, table, counts[table.name], batch, on_table, on_rows)
                _restore_counters(src, dst, batch)
                for table in REWRITTEN_LAST:  # after the counters: their triggers write these
                    dst.execute(table.delete())
                    _copy_table(src, dst, table, counts[table.name], batch, on_table, on_rows)
                _advance_ids(src, dst, tables)
                _verify(src, dst, tables, counts)
        except DBAPIError as error:
            cause = str(error.orig or error).strip().splitlines()[0]
            raise StoreError(
                f"the copy was refused by the target, nothing copied: {cause}"
            ) from None
    return counts


def _copy_table(
    src: Connection,
    dst: Connection,
    table: Table,
    total: int,
    batch: int,
    on_table: OnTable,
    on_rows: OnRows,
) -> None:
    """Rows in primary-key order; references within the table (a session's parent) are set in
    a second pass, so a row may name one that comes after it."""
    on_table(table.name, total)
    later = _self_references(table)
    batch = min(batch, int(table.info.get("copy_batch", batch)))  # large rows, fewer at a time
    for rows in _batches(src, table, batch):
        _insert(dst, table, [{**row, **dict.fromkeys(later)} for row in rows] if later else rows)
        on_rows(table.name, len(rows))
    if not later:
        return
    keys = list(table.primary_key.columns)
    change = update(table).where(*(key == bindparam(f"_k_{key.name}") for key in keys))
    change = change.values({name: bindparam(f"_v_{name}") for name in later})
    linked = select(*keys, *(table.c[name] for name in later)).where(
        or_(*(table.c[name].is_not(None) for name in later))
    )
    result = src.execution_options(yield_per=batch).execute(linked)
    for part in result.partitions(batch):
        dst.execute(
            change,
            [
                {
                    **{f"_k_{key.name}": row._mapping[key.name] for key in keys},
                    **{f"_v_{name}": row._mapping[name] for name in later},
                }
                for row in part
            ],
        )


def _self_references(table: Table) -> list[str]:
    return [
        column.name
        for column in table.columns
        if any(fk.column.table is table for fk in column.foreign_keys)
    ]


def _columns(table: Table) -> list[Column[Any]]:
    """The columns a row carries (a generated column is the target's to compute)."""
    return [c for c in table.columns if c.computed is None]


def _batches(conn: Connection, table: Table, batch: int) -> Iterator[list[dict[str, Any]]]:
    columns = _columns(table)
    query = select(*columns).order_by(*table.primary_key.columns)
    result = conn.execution_options(yield_per=batch).execute(query)
    try:
        for part in result.partitions(batch):
            yield [dict(row._mapping) for row in part]
    finally:
        result.close()


def _insert(conn: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
    try:
        conn.execute(table.insert(), rows)
    except DBAPIError as error:
        cause = str(error.orig or error).strip().splitlines()[0]
        raise StoreError(
            f"the target refused a row of {table.name} ({cause}); nothing was copied"
        ) from None


def _restore_counters(src: Connection, dst: Connection, batch: int) -> None:
    """Counters on the target as the source has them, whatever the target's triggers did,
    then read back and compared, batch by batch."""
    for table, name in COUNTERS:
        key = table.primary_key.columns.values()[0]
        column = table.c[name]
        change = (
            update(table)
            .where(key == bindparam("_key"), column != bindparam("_value"))
            .values({name: bindparam("_value")})
        )
        result = src.execution_options(yield_per=batch).execute(select(key, column).order_by(key))
        for part in result.partitions(batch):
            wanted = {k: v for k, v in part}
            dst.execute(change, [{"_key": k, "_value": v} for k, v in wanted.items()])
            read = dst.execute(select(key, column).where(key.in_(list(wanted))))
            found = {k: v for k, v in read}
            if found != wanted:
                wrong = next(k for k in wanted if found.get(k) != wanted[k])
                raise StoreError(
                    f"{table.name} {wrong}: {name} {found.get(wrong)} on the target but "
                    f"{wanted[wrong]} in the source; nothing was copied"
                )


def _verify(src: Connection, dst: Connection, tables: list[Table], counts: dict[str, int]) -> None:
    """Row counts per table, and the rewritten tables row for row (counters: above)."""
    for table in tables:
        got = _count(dst, table)
        if got != counts[table.name]:
            raise StoreError(
                f"{table.name}: {got:,} rows on the target but {counts[table.name]:,} in the "
                "source; nothing was copied"
            )
    for table in REWRITTEN_LAST:
        order = list(table.primary_key.columns)
        mine = src.execute(select(table).order_by(*order)).all()
        theirs = dst.execute(select(table).order_by(*order)).all()
        if sorted(map(tuple, mine)) != sorted(map(tuple, theirs)):
            raise StoreError(f"{table.name} differs after the copy; nothing was copied")


def _advance_ids(src: Connection, dst: Connection, tables: list[Table]) -> None:
    """Each serial id's next value past the source's (its high-water mark, not just max(id):
    ids of deleted rows are not handed out again)."""
    for table in tables:
        column = table.autoincrement_column
        if column is None:
            continue
        highest = max(
            _high_water(src, table.name, column.name),
            int(dst.execute(select(func.coalesce(func.max(column), 0))).scalar_one()),
        )
        if highest > 0 and (dst.dialect.name != "sqlite" or _sqlite_autoincrement(table)):
            _set_high_water(dst, table.name, column.name, highest)


def _sqlite_autoincrement(table: Table) -> bool:
    """AUTOINCREMENT on SQLite (else ids are max(rowid) + 1 and need nothing)."""
    return bool(table.dialect_options["sqlite"].get("autoincrement"))


def _high_water(conn: Connection, table: str, column: str) -> int:
    if conn.dialect.name == "sqlite":
        return sqlite.autoincrement_high_water(conn, table)
    value = conn.execute(
        text("SELECT pg_sequence_last_value(pg_get_serial_sequence(:t, :c)::regclass)"),
        {"t": table, "c": column},
    ).scalar()
    return int(value or 0)


def _set_high_water(conn: Connection, table: str, column: str, value: int) -> None:
    if conn.dialect.name == "sqlite":
        sqlite.set_autoincrement_high_water(conn, table, value)
        return
    conn.execute(
        text("SELECT setval(pg_get_serial_sequence(:t, :c), :v)"),
        {"t": table, "c": column, "v": value},
    )
