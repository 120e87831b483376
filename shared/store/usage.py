"""The usage ledger and its rollups: every model call's row, written in its caller's transaction.

`record` inserts one ledger row per call and adds the calls to three rollups in the same
transaction: per UTC day × platform × model × kind (tokens, cost, a latency histogram, calls
per hour of day), per day × session, and per day × tool. Reports read the rollups, so they cost
the same at any volume; the ledger keeps each call as the endpoint reported it.

Session ids are plain text: pruning sessions keeps their spending. Rollup rows are upserted
in one order (table, then key), so concurrent writers on PostgreSQL queue instead of
deadlocking. The fleet-wide rollups (per day and per tool) are split into SHARDS rows per key,
chosen by session: a rollup row stays locked until its turn commits, and with one row per key
every worker of a fleet queued on it (reports sum the shards).

On PostgreSQL all of it is one statement, one round trip: the ledger insert and the rollup
upserts as data-modifying CTEs, each gated on the count of the one before it, so they still run
(and lock) in that one order. SQLite runs them one by one in-process, where a statement costs
no round trip.
"""

from __future__ import annotations

import json
import zlib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from sqlalchemy import Connection, Table, bindparam, cast, func, insert, literal, select, union_all
from sqlalchemy.dialects import postgresql, sqlite

from shared.db.errors import StoreError
from shared.db.prepared import Prepared
from shared.db.schema import (
    HOUR_COLUMNS,
    LATENCY_COLUMNS,
    usage_daily,
    usage_ledger,
    usage_sessions,
    usage_tools,
)
from shared.pricing import Pricing
from shared.usage import ModelCall, day_of, hour_of_day, latency_bucket

SHARDS = 16  # rows per fleet-wide rollup key: turns of different sessions rarely share one

SUM_COLUMNS = (
    "calls",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "estimated_calls",
    "unpriced_calls",
    "cost",
)


@dataclass(frozen=True, slots=True)
class Where:
    """Whose calls these are."""

    platform: str
    session_id: str | None = None
    turn_id: int | None = None
    cron_job: str | None = None


@dataclass(frozen=True, slots=True)
class Priced:
    call: ModelCall
    cost: float | None


def _tools_json(call: ModelCall) -> str | None:
    if not call.tools:
        return None
    counts: dict[str, list[int]] = {}
    for use in call.tools:
        pair = counts.setdefault(use.name, [0, 0])
        pair[0] += 1
        pair[1] += int(use.failed)
    return json.dumps(counts, separators=(",", ":"), sort_keys=True)


def _ledger_row(where: Where, item: Priced) -> dict[str, Any]:
    call = item.call
    return {
        "at": call.at,
        "session_id": where.session_id,
        "turn_id": where.turn_id,
        "platform": where.platform,
        "model": call.model,
        "kind": call.kind,
        "input_tokens": call.input_tokens,
        "output_tokens": call.output_tokens,
        "cached_tokens": call.cached_tokens,
        "reasoning_tokens": call.reasoning_tokens,
        "estimated": int(call.estimated),
        "latency_ms": call.latency_ms,
        "cost": item.cost,
        "cron_job": where.cron_job,
        "tools": _tools_json(call),
    }


def _sums(items: Iterable[Priced]) -> dict[str, Any]:
    sums: dict[str, Any] = dict.fromkeys(SUM_COLUMNS, 0)
    sums["cost"] = 0.0
    for item in items:
        call = item.call
        sums["calls"] += 1
        sums["input_tokens"] += call.input_tokens
        sums["output_tokens"] += call.output_tokens
        sums["cached_tokens"] += call.cached_tokens or 0
        sums["reasoning_tokens"] += call.reasoning_tokens or 0
        sums["estimated_calls"] += int(call.estimated)
        sums["unpriced_calls"] += int(item.cost is None)
        sums["cost"] += item.cost or 0.0
    return sums


def _daily(items: Sequence[Priced]) -> dict[str, Any]:
    values = _sums(items)
    values["latency_ms"] = sum(item.call.latency_ms for item in items)
    values.update(dict.fromkeys(LATENCY_COLUMNS, 0))
    values.update(dict.fromkeys(HOUR_COLUMNS, 0))
    for item in items:
        values[LATENCY_COLUMNS[latency_bucket(item.call.latency_ms)]] += 1
        values[HOUR_COLUMNS[hour_of_day(item.call.at)]] += 1
    return values


class _Upsert:
    """Insert a rollup row, or add to the one at its key: built once per table, one statement
    per dialect (SQLite's runs on the driver's cursor, see shared/db/prepared.py)."""

    def __init__(
        self, table: Table, keys: Sequence[str], adds: Sequence[str], fixed: Sequence[str] = ()
    ):
        columns = [*keys, *adds, *fixed]
        self.table, self.keys, self.adds, self.columns = table, tuple(keys), tuple(adds), columns
        self._by_dialect: dict[str, Any] = {}
        for name, module in (("sqlite", sqlite), ("postgresql", postgresql)):
            stmt: Any = module.insert(table).values({c: bindparam(c) for c in columns})
            stmt = stmt.on_conflict_do_update(
                index_elements=list(keys),
                set_={c: table.c[c] + stmt.excluded[c] for c in adds},
            )
            self._by_dialect[name] = Prepared(stmt) if name == "sqlite" else stmt

    def from_rows(self, prefix: str, count: int, after: Any) -> Any:
        """PostgreSQL's upsert of `count` rows bound as `<prefix><i>_<column>`, run once `after`
        (a count of the previous step's rows) has been computed; it returns a row per row."""
        table, columns = self.table, self.columns
        rows = [
            select(
                *[cast(bindparam(f"{prefix}{i}_{c}"), table.c[c].type).label(c) for c in columns]
            ).where(after.scalar_subquery() >= 0)
            for i in range(count)
        ]
        stmt: Any = postgresql.insert(table).from_select(
            columns, rows[0] if count == 1 else union_all(*rows)
        )
        stmt = stmt.on_conflict_do_update(
            index_elements=list(self.keys),
            set_={c: table.c[c] + stmt.excluded[c] for c in self.adds},
        )
        return stmt.returning(literal(1))

    def run(self, conn: Connection, values: dict[str, Any]) -> None:
        found = self._by_dialect.get(conn.dialect.name)
        if found is None:  # pragma: no cover - the store runs on these two
            raise StoreError(f"the usage ledger has no upsert for {conn.dialect.name}")
        if isinstance(found, Prepared):
            found.rowcount(conn, values)
        else:
            conn.execute(found, values)


_DAILY = _Upsert(
    usage_daily,
    ("day", "platform", "model", "kind", "shard"),
    (*SUM_COLUMNS, "latency_ms", *LATENCY_COLUMNS, *HOUR_COLUMNS),
)
_SESSIONS = _Upsert(
    usage_sessions, ("day", "session_id", "platform", "model"), SUM_COLUMNS, ("cron_job",)
)
_TOOLS = _Upsert(usage_tools, ("day", "platform", "model", "tool", "shard"), ("calls", "failures"))


def shard_of(where: Where) -> int:
    """The rollup shard of these calls: by session (a session's turns run one at a time), else
    by cron job; calls of neither share shard 0."""
    owner = where.session_id or where.cron_job
    return zlib.crc32(owner.encode()) % SHARDS if owner else 0


_LEDGER_COLUMNS = (
    "at",
    "session_id",
    "turn_id",
    "platform",
    "model",
    "kind",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "estimated",
    "latency_ms",
    "cost",
    "cron_job",
    "tools",
)
_INSERT = Prepared(insert(usage_ledger).values({c: bindparam(c) for c in _LEDGER_COLUMNS}))


def record(conn: Connection, calls: Sequence[ModelCall], where: Where, pricing: Pricing) -> None:
    """Inside the caller's write: the calls' ledger rows and their rollups."""
    found = rows_of(calls, where, pricing)
    if found is not None:
        found.write(conn)


@dataclass(frozen=True, slots=True)
class Usage:
    """The rows `record` writes for some calls: the ledger's, and the rollups' in key order
    (the order they lock in). A statement of another store module may carry them on PostgreSQL
    (`ctes(*shape)` in its WITH, bound with `params()`) instead of `write`'s statement."""

    ledger: list[dict[str, Any]]
    daily: list[dict[str, Any]]
    per_session: list[dict[str, Any]]
    tools: list[dict[str, Any]]

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (len(self.ledger), len(self.daily), len(self.per_session), len(self.tools))

    def params(self) -> dict[str, Any]:
        params: dict[str, Any] = {}
        tables = (self.ledger, self.daily, self.per_session, self.tools)
        for prefix, rows in zip("ldst", tables, strict=True):
            for i, row in enumerate(rows):
                params.update({f"{prefix}{i}_{c}": v for c, v in row.items()})
        return params

    def write(self, conn: Connection) -> None:
        if conn.dialect.name == "postgresql":
            _in_one_statement(*self.shape).rowcount(conn, self.params())
            return
        for row in self.ledger:
            _INSERT.rowcount(conn, row)
        for row in self.daily:
            _DAILY.run(conn, row)
        for row in self.per_session:
            _SESSIONS.run(conn, row)
        for row in self.tools:
            _TOOLS.run(conn, row)


def rows_of(calls: Sequence[ModelCall], where: Where, pricing: Pricing) -> Usage | None:
    """What `record` would write for `calls` (None for no calls)."""
    if not calls:
        return None
    items = [
        Priced(c, pricing.cost(c.model, c.input_tokens, c.output_tokens, c.cached_tokens))
        for c in calls
    ]
    return Usage([_ledger_row(where, item) for item in items], *_rollups(items, where))


Rows = list[dict[str, Any]]


def _rollups(items: Sequence[Priced], where: Where) -> tuple[Rows, Rows, Rows]:
    """The rollup rows the calls add to, each table's in key order (the order they lock in)."""
    daily: dict[tuple[int, str, str], list[Priced]] = defaultdict(list)
    per_session: dict[tuple[int, str], list[Priced]] = defaultdict(list)
    tools: dict[tuple[int, str, str], list[int]] = defaultdict(lambda: [0, 0])
    for item in items:
        call, day = item.call, day_of(item.call.at)
        daily[(day, call.model, call.kind)].append(item)
        per_session[(day, call.model)].append(item)
        for use in call.tools:
            counts = tools[(day, call.model, use.name)]
            counts[0] += 1
            counts[1] += int(use.failed)
    platform, shard = where.platform, shard_of(where)
    daily_rows = [
        {"day": day, "platform": platform, "model": model, "kind": kind, "shard": shard}
        | _daily(group)
        for (day, model, kind), group in sorted(daily.items())
    ]
    session_rows = (
        [
            {"day": day, "session_id": where.session_id, "platform": platform, "model": model}
            | _sums(group)
            | {"cron_job": where.cron_job}
            for (day, model), group in sorted(per_session.items())
        ]
        if where.session_id is not None
        else []
    )
    tool_rows = [
        {"day": day, "platform": platform, "model": model, "tool": tool, "shard": shard}
        | {"calls": count, "failures": failed}
        for (day, model, tool), (count, failed) in sorted(tools.items())
    ]
    return daily_rows, session_rows, tool_rows


@lru_cache(maxsize=64)
def _in_one_statement(ledger: int, daily: int, sessions: int, tools: int) -> Prepared:
    """PostgreSQL: the ledger rows and every rollup upsert as one statement. The sub-statements
    of a WITH run in no promised order, so each waits for the previous one's RETURNING rows (a
    count in its WHERE): rollup rows lock in the order of the statement-per-row path."""
    *ctes, last = _steps(ledger, daily, sessions, tools)
    return Prepared(last.add_cte(*ctes) if ctes else last, dialect="postgresql")


@lru_cache(maxsize=64)
def ctes(ledger: int, daily: int, sessions: int, tools: int) -> tuple[Any, ...]:
    """`_in_one_statement`'s steps as CTEs (`usage1`…), for a statement that carries them."""
    *before, last = _steps(ledger, daily, sessions, tools, name="usage")
    return (*before, last.cte(f"usage{len(before) + 1}"))


def _steps(ledger: int, daily: int, sessions: int, tools: int, name: str = "step") -> list[Any]:
    """The ledger's insert, then each rollup's upsert once the step before it has run; every
    step but the last as a CTE named `<name><n>`."""
    steps: list[Any] = [
        insert(usage_ledger)
        .values([{c: bindparam(f"l{i}_{c}") for c in _LEDGER_COLUMNS} for i in range(ledger)])
        .returning(literal(1))
    ]
    for prefix, count, upsert in (
        ("d", daily, _DAILY),
        ("s", sessions, _SESSIONS),
        ("t", tools, _TOOLS),
    ):
        if not count:
            continue
        before = steps[-1].cte(f"{name}{len(steps)}")
        steps[-1] = before
        steps.append(upsert.from_rows(prefix, count, select(func.count()).select_from(before)))
    return steps
