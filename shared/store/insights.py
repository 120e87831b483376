"""What `hermes insights` reads: usage over a window of UTC days, from the ledger's rollups.

Six grouped reads of the rollups (shared.store.usage), none of them over the ledger or the
messages, so a year of a busy fleet is a few thousand rows. Latency percentiles come from the
rollups' histograms (shared.usage.percentile), the same on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, Connection, func, select

from shared.db.schema import (
    HOUR_COLUMNS,
    LATENCY_COLUMNS,
    cron_jobs,
    sessions,
    usage_daily,
    usage_sessions,
    usage_tools,
)
from shared.store.usage import SUM_COLUMNS
from shared.usage import percentile, weekday_of

TOP_SESSIONS = 10


@dataclass(frozen=True, slots=True)
class Window:
    """UTC day numbers, both ends included, and the optional filters."""

    first_day: int
    last_day: int
    platform: str | None = None
    model: str | None = None

    @property
    def days(self) -> int:
        return self.last_day - self.first_day + 1


@dataclass(slots=True)
class Usage:
    """Sums over a set of calls."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    estimated_calls: int = 0
    unpriced_calls: int = 0
    cost: float = 0.0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, values: dict[str, Any]) -> None:
        """Add a row of sums (PostgreSQL's SUM of a BIGINT is a NUMERIC: made int again)."""
        for name in SUM_COLUMNS:
            kind = float if name == "cost" else int
            setattr(self, name, getattr(self, name) + kind(values.get(name) or 0))


@dataclass(slots=True)
class Group:
    """One model, platform or call kind: sums, latency and a per-day series."""

    name: str
    usage: Usage = field(default_factory=Usage)
    latency_ms_total: float = 0.0
    histogram: list[int] = field(default_factory=lambda: [0] * len(LATENCY_COLUMNS))
    daily_cost: list[float] = field(default_factory=list)
    daily_tokens: list[int] = field(default_factory=list)

    def p(self, q: float) -> float | None:
        return percentile(self.histogram, q)


@dataclass(frozen=True, slots=True)
class SessionSpend:
    session_id: str
    title: str | None
    platform: str
    usage: Usage
    pruned: bool  # the session is gone; its spending stays


@dataclass(frozen=True, slots=True)
class ToolCount:
    tool: str
    calls: int
    failures: int


@dataclass(frozen=True, slots=True)
class CronSpend:
    job_id: str
    name: str | None  # None: the job was removed
    usage: Usage


@dataclass(slots=True)
class Report:
    window: Window
    total: Group
    by_model: list[Group]
    by_platform: list[Group]
    by_kind: list[Group]
    days: list[int]  # day numbers of the window, in order
    daily_calls: list[int]
    daily_tokens: list[int]
    daily_cost: list[float]
    heatmap: list[list[int]]  # [weekday 0=Monday][UTC hour] calls
    top_sessions: list[SessionSpend]
    tools: list[ToolCount]
    cron: list[CronSpend]


def _filters(table: Any, window: Window) -> list[ColumnElement[bool]]:
    where = [table.c.day >= window.first_day, table.c.day <= window.last_day]
    if window.platform is not None:
        where.append(table.c.platform == window.platform)
    if window.model is not None:
        where.append(table.c.model == window.model)
    return where


def _sum_columns(table: Any) -> list[Any]:
    return [func.sum(table.c[name]).label(name) for name in SUM_COLUMNS]


def _ranked(groups: dict[str, Group]) -> list[Group]:
    return sorted(groups.values(), key=lambda g: (-g.usage.cost, -g.usage.tokens, g.name))


def _groups(conn: Connection, window: Window) -> tuple[Group, dict[str, dict[str, Group]]]:
    d = usage_daily
    rows = conn.execute(
        select(
            d.c.platform,
            d.c.model,
            d.c.kind,
            *_sum_columns(d),
            func.sum(d.c.latency_ms).label("latency_ms"),
            *(func.sum(d.c[name]).label(name) for name in LATENCY_COLUMNS),
        )
        .where(*_filters(d, window))
        .group_by(d.c.platform, d.c.model, d.c.kind)
    ).all()
    total = Group("total")
    dims: dict[str, dict[str, Group]] = {"model": {}, "platform": {}, "kind": {}}
    for row in rows:
        values = row._mapping
        histogram = [int(values[name] or 0) for name in LATENCY_COLUMNS]
        for dim, table in dims.items():
            name = str(values[dim])
            targets = [table.setdefault(name, Group(name))]
            if dim == "model":
                targets.append(total)
            for group in targets:
                group.usage.add(dict(values))
                group.latency_ms_total += float(values["latency_ms"] or 0)
                group.histogram = [a + b for a, b in zip(group.histogram, histogram, strict=True)]
    return total, dims


def _series(conn: Connection, window: Window, report: Report) -> None:
    d = usage_daily
    rows = conn.execute(
        select(
            d.c.day,
            d.c.platform,
            d.c.model,
            func.sum(d.c.calls),
            func.sum(d.c.input_tokens + d.c.output_tokens),
            func.sum(d.c.cost),
        )
        .where(*_filters(d, window))
        .group_by(d.c.day, d.c.platform, d.c.model)
    ).all()
    n = window.days
    by_model = {g.name: g for g in report.by_model}
    by_platform = {g.name: g for g in report.by_platform}
    for group in (*report.by_model, *report.by_platform):
        group.daily_cost, group.daily_tokens = [0.0] * n, [0] * n
    for day, platform, model, calls, tokens, cost in rows:
        i = int(day) - window.first_day
        report.daily_calls[i] += int(calls or 0)
        report.daily_tokens[i] += int(tokens or 0)
        report.daily_cost[i] += float(cost or 0)
        found = (by_model.get(str(model)), by_platform.get(str(platform)))
        for group in (g for g in found if g is not None):
            group.daily_cost[i] += float(cost or 0)
            group.daily_tokens[i] += int(tokens or 0)


def _heatmap(conn: Connection, window: Window) -> list[list[int]]:
    d = usage_daily
    rows = conn.execute(
        select(d.c.day, *(func.sum(d.c[name]) for name in HOUR_COLUMNS))
        .where(*_filters(d, window))
        .group_by(d.c.day)
    ).all()
    grid = [[0] * 24 for _ in range(7)]
    for day, *hours in rows:
        line = grid[weekday_of(int(day))]
        for hour, calls in enumerate(hours):
            line[hour] += int(calls or 0)
    return grid


def _usage(values: Any) -> Usage:
    usage = Usage()
    usage.add(dict(values))
    return usage


def _top_sessions(conn: Connection, window: Window, limit: int) -> list[SessionSpend]:
    s = usage_sessions
    cost = func.sum(s.c.cost)
    rows = conn.execute(
        select(s.c.session_id, func.min(s.c.platform).label("platform"), *_sum_columns(s))
        .where(*_filters(s, window))
        .group_by(s.c.session_id)
        .order_by(cost.desc(), func.sum(s.c.input_tokens + s.c.output_tokens).desc())
        .limit(limit)
    ).all()
    ids = [str(row.session_id) for row in rows]
    titles = dict(
        conn.execute(select(sessions.c.id, sessions.c.title).where(sessions.c.id.in_(ids))).all()
    )
    return [
        SessionSpend(
            session_id=str(row.session_id),
            title=titles.get(row.session_id),
            platform=str(row.platform),
            usage=_usage(row._mapping),
            pruned=row.session_id not in titles,
        )
        for row in rows
    ]


def _tools(conn: Connection, window: Window) -> list[ToolCount]:
    t = usage_tools
    calls = func.sum(t.c.calls)
    rows = conn.execute(
        select(t.c.tool, calls, func.sum(t.c.failures))
        .where(*_filters(t, window))
        .group_by(t.c.tool)
        .order_by(calls.desc(), t.c.tool)
    ).all()
    return [ToolCount(str(tool), int(n or 0), int(failed or 0)) for tool, n, failed in rows]


def _cron(conn: Connection, window: Window) -> list[CronSpend]:
    s = usage_sessions
    rows = conn.execute(
        select(s.c.cron_job, *_sum_columns(s))
        .where(*_filters(s, window), s.c.cron_job.is_not(None))
        .group_by(s.c.cron_job)
        .order_by(func.sum(s.c.cost).desc(), s.c.cron_job)
    ).all()
    ids = [str(row.cron_job) for row in rows]
    names = dict(
        conn.execute(select(cron_jobs.c.id, cron_jobs.c.name).where(cron_jobs.c.id.in_(ids))).all()
    )
    return [
        CronSpend(str(row.cron_job), names.get(row.cron_job), _usage(row._mapping)) for row in rows
    ]


def report(conn: Connection, window: Window, *, top: int = TOP_SESSIONS) -> Report:
    """Everything `hermes insights` shows for `window`, read in one snapshot."""
    total, dims = _groups(conn, window)
    n = window.days
    result = Report(
        window=window,
        total=total,
        by_model=_ranked(dims["model"]),
        by_platform=_ranked(dims["platform"]),
        by_kind=_ranked(dims["kind"]),
        days=list(range(window.first_day, window.last_day + 1)),
        daily_calls=[0] * n,
        daily_tokens=[0] * n,
        daily_cost=[0.0] * n,
        heatmap=_heatmap(conn, window),
        top_sessions=_top_sessions(conn, window, top),
        tools=_tools(conn, window),
        cron=_cron(conn, window),
    )
    _series(conn, window, result)
    return result


def known_values(conn: Connection, column: str) -> Sequence[str]:
    """Every platform or model the rollups have seen (for a clear "no such model" message)."""
    col = usage_daily.c[column]
    return [str(v) for v in conn.execute(select(col).distinct().order_by(col)).scalars()]
