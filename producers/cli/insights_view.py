"""How `hermes insights` looks in a terminal: Rich tables, bars, sparklines, a day chart and an
hour × weekday heatmap, all drawn with block characters (they read without colour too)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from shared.wording import plural

SPARKS = " ▁▂▃▄▅▆▇█"
EIGHTHS = " ▏▎▍▌▋▊▉█"
SHADES = " ░▒▓█"
HEAT_STYLES = ("grey30", "green4", "green3", "yellow3", "orange_red1")
CHART_ROWS = 8
CHART_COLUMNS = 60
SPARK_COLUMNS = 14
BAR_CELLS = 8
DAY_CELLS = 6  # at most this many columns per day in short windows
NO_VALUE = "—"
WIDE = 100  # terminal columns that fit every column of the tables
PIPED_WIDTH = 110  # the width written when stdout is not a terminal


def money(value: float, complete: bool = True) -> str:
    text = f"${value:,.2f}" if value >= 0.995 or value == 0 else f"${value:.4f}"
    return text if complete else text + "+"


def cost_of(row: dict[str, Any]) -> str:
    """A row's cost: "unknown" when none of its calls had a price, "+" when some had none."""
    if row["calls"] and row["unpriced_calls"] == row["calls"]:
        return "unknown"
    return money(row["cost"], row["cost_complete"])


def tokens(value: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.1f}{unit}"
    return str(value)


def millis(value: float | None) -> str:
    if value is None:
        return NO_VALUE
    return f"{value / 1000:.1f}s" if value >= 1000 else f"{value:.0f}ms"


def resample(values: Sequence[float], width: int) -> list[float]:
    """`values` summed into at most `width` consecutive buckets."""
    if len(values) <= width:
        return list(values)
    step = len(values) / width
    return [sum(values[int(i * step) : int((i + 1) * step)]) for i in range(width)]


def sparkline(values: Sequence[float], width: int = SPARK_COLUMNS) -> str:
    points = resample(values, width)
    top = max(points, default=0)
    if top <= 0:
        return " " * len(points)
    return "".join(
        SPARKS[0] if v <= 0 else SPARKS[max(1, round(v / top * (len(SPARKS) - 1)))] for v in points
    )


def bar(value: float, top: float, cells: int = BAR_CELLS) -> str:
    if top <= 0 or value <= 0:
        return ""
    eighths = max(1, round(value / top * cells * 8))
    return "█" * (eighths // 8) + (EIGHTHS[eighths % 8] if eighths % 8 else "")


def day_chart(values: Sequence[float], dates: Sequence[str], label: str) -> Text:
    """A vertical bar chart, one column per day (or per group of days for long windows)."""
    points = resample(values, CHART_COLUMNS)
    if len(points) < CHART_COLUMNS // 2:  # a short window: wider bars with a gap between
        cells = min(DAY_CELLS, CHART_COLUMNS // max(1, len(points)))
        points = [v for value in points for v in [value] * (cells - 1) + [0.0]]
    top = max(points, default=0)
    text = Text()
    text.append(f"{label} per {'day' if len(points) == len(values) else 'period'}", "bold")
    text.append(f"  (max {tokens(int(top)) if top >= 1 else top:})\n")
    for row in range(CHART_ROWS, 0, -1):
        line = ""
        for value in points:
            level = value / top * CHART_ROWS * 8 if top > 0 else 0
            filled = level - (row - 1) * 8
            line += "█" if filled >= 8 else (EIGHTHS[int(filled)] if filled > 0 else " ")
        text.append(line.replace("▏", "▁"), "cyan")
        text.append("\n")
    if dates:
        gap = max(1, len(points) - len(dates[0]) - len(dates[-1]))
        text.append(f"{dates[0]}{' ' * gap}{dates[-1]}", "dim")
    return text


def heatmap(grid: Sequence[Sequence[int]], weekdays: Sequence[str]) -> Text:
    top = max((max(row) for row in grid), default=0)
    text = Text()
    text.append("Calls by hour (UTC) and weekday\n", "bold")
    text.append("     " + "".join(f"{h:<3d}" if h % 3 == 0 else "   " for h in range(24)) + "\n")
    for name, row in zip(weekdays, grid, strict=True):
        text.append(f"{name}  ")
        for calls in row:
            level = 0 if calls <= 0 or top <= 0 else max(1, round(calls / top * 4))
            text.append(SHADES[level] * 3 if level else " · ", HEAT_STYLES[level])
        text.append("\n")
    text.append(f"     · none  ░ ▒ ▓ █ up to {plural(top, 'call')} an hour-slot", "dim")
    return text


def _table(title: str) -> Table:
    return Table(
        title=title,
        title_justify="left",
        title_style="bold",
        header_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )


def _group_table(
    title: str, groups: list[dict[str, Any]], *, series: bool, narrow: bool = False
) -> Table:
    """One row per group; a narrow terminal (under WIDE columns) goes without the share bars."""
    table = _table(title)
    name = title.split()[-1].capitalize()
    table.add_column(name, no_wrap=True, overflow="ellipsis", max_width=28)
    for header in ("Calls", "In / cached / out", "Cost", "p50 / p95"):
        table.add_column(header, justify="right", no_wrap=True)
    if not narrow:
        table.add_column("Share", no_wrap=True)
    if series:
        table.add_column("By day", no_wrap=True)
    top_cost = max((g["cost"] for g in groups), default=0.0)
    top_tokens = max((g["tokens"] for g in groups), default=0)
    for g in groups:
        share = bar(g["cost"], top_cost) if top_cost > 0 else bar(g["tokens"], top_tokens)
        spent = " / ".join(tokens(g[k]) for k in ("input_tokens", "cached_tokens", "output_tokens"))
        latency = g["latency_ms"]
        cells: list[Any] = [
            g["name"],
            f"{g['calls']:,}",
            spent,
            cost_of(g),
            f"{millis(latency['p50'])} / {millis(latency['p95'])}",
        ]
        if not narrow:
            cells.append(Text(share, "magenta"))
        if series:
            trend = g["daily_cost"] if top_cost > 0 else g["daily_tokens"]
            cells.append(Text(sparkline(trend), "cyan"))
        table.add_row(*cells)
    for column in table.columns[1:]:  # numbers and charts keep their width; names give way
        column.min_width = max((len(str(cell)) for cell in column.cells), default=0)
        column.min_width = max(column.min_width, len(str(column.header)))
    return table


def _sessions_table(rows: list[dict[str, Any]]) -> Table:
    table = _table("Top sessions by cost")
    for name, justify in (("Session", "left"), ("Title", "left"), ("Source", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for name in ("Calls", "Tokens", "Cost"):
        table.add_column(name, justify="right")
    for s in rows:
        title = "(pruned)" if s["pruned"] else (s["title"] or "")
        table.add_row(
            s["session_id"],
            Text(title[:40], "dim" if s["pruned"] else ""),
            s["platform"],
            f"{s['calls']:,}",
            tokens(s["tokens"]),
            cost_of(s),
        )
    return table


def _tools_table(rows: list[dict[str, Any]]) -> Table:
    table = _table("Tool calls")
    table.add_column("Tool")
    table.add_column("Calls", justify="right")
    table.add_column("Failed", justify="right")
    table.add_column("")
    top = max((t["calls"] for t in rows), default=0)
    for t in rows:
        failed = t["failures"]
        rate = f"{failed:,} ({failed / t['calls']:.0%})" if t["calls"] else "0"
        table.add_row(t["tool"], f"{t['calls']:,}", rate, Text(bar(t["calls"], top), "magenta"))
    return table


def _cron_table(rows: list[dict[str, Any]]) -> Table:
    table = _table("Cron jobs' spend")
    for name in ("Job", "Calls", "Tokens", "Cost"):
        table.add_column(name, justify="left" if name == "Job" else "right")
    for c in rows:
        name = c["name"] or f"{c['job_id']} (removed)"
        table.add_row(name, f"{c['calls']:,}", tokens(c["tokens"]), cost_of(c))
    return table


def _headline(doc: dict[str, Any], elapsed: float) -> Panel:
    w, t = doc["window"], doc["totals"]
    scope = "".join(f", {k} {w[k]}" for k in ("source", "model") if w[k])
    lines = Text()
    lines.append(f"{w['from']} → {w['to']}", "bold")
    lines.append(f"  ({plural(w['days'], 'day')}, UTC{scope})\n")
    lines.append(f"{t['calls']:,} model calls · ")
    lines.append(f"{tokens(t['input_tokens'])} in ({tokens(t['cached_tokens'])} cached) · ")
    lines.append(f"{tokens(t['output_tokens'])} out · ")
    lines.append(money(t["cost"], t["cost_complete"]), "bold green")
    lines.append(
        f" · latency p50 {millis(t['latency_ms']['p50'])}, p95 {millis(t['latency_ms']['p95'])}"
    )
    notes = []
    if t["unpriced_calls"]:
        notes.append(f"{plural(t['unpriced_calls'], 'call')} to models without a price (pricing:)")
    if t["estimated_calls"]:
        notes.append(f"{plural(t['estimated_calls'], 'call')} with estimated tokens")
    if notes:
        lines.append("\n" + "; ".join(notes), "yellow")
    return Panel(lines, title="hermes insights", subtitle=f"read in {elapsed * 1000:.0f} ms")


def show(doc: dict[str, Any], *, elapsed: float, console: Console | None = None) -> None:
    """Print a report from its JSON document (producers.cli.insights.report_document)."""
    out = console or Console(highlight=False, width=None if sys.stdout.isatty() else PIPED_WIDTH)
    narrow = out.width < WIDE
    out.print(_headline(doc, elapsed))
    if not doc["totals"]["calls"]:
        out.print("No model calls were recorded in this window.")
        return
    daily = doc["daily"]
    dates = [d["date"] for d in daily]
    priced = doc["totals"]["cost"] > 0
    values = [d["cost"] if priced else d["tokens"] for d in daily]
    parts: list[Any] = [
        day_chart(values, dates, "Cost ($)" if priced else "Tokens"),
        heatmap(doc["heatmap"]["calls"], doc["heatmap"]["weekdays"]),
        _group_table("By model", doc["by_model"], series=True, narrow=narrow),
        _group_table("By platform", doc["by_platform"], series=True, narrow=narrow),
        _group_table("By call kind", doc["by_kind"], series=False, narrow=narrow),
    ]
    if doc["top_sessions"]:
        parts.append(_sessions_table(doc["top_sessions"]))
    if doc["tools"]:
        parts.append(_tools_table(doc["tools"]))
    if doc["cron"]:
        parts.append(_cron_table(doc["cron"]))
    for part in parts:
        out.print(part)
        out.print()
