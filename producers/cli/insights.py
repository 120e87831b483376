"""`hermes insights`: where the tokens, money and time went, from the usage ledger's rollups.

A window of UTC days (`--days N`, today included, or `--since DATE`), optionally one platform
or one model: totals; per model, platform and call kind the tokens, cost, calls and latency
p50/p95; activity by day and by hour × weekday; the costliest sessions; tool calls with their
failures; cron jobs' spend. Rich in a terminal, `--json` for scripts, `--html FILE` one page.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from producers.cli.app import App, fail, pass_app
from producers.cli.guard import store_command
from shared.platforms import known_platforms
from shared.store import insights as reads
from shared.store.insights import Group, Report, Usage, Window
from shared.usage import DAY_SECONDS, day_of

DEFAULT_DAYS = 30
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def iso_day(day: int) -> str:
    return datetime.fromtimestamp(day * DAY_SECONDS, UTC).strftime("%Y-%m-%d")


def window_of(
    now: float, days: int | None, since: datetime | None, source: str | None, model: str | None
) -> Window:
    """The window the options ask for; UsageError for options that contradict each other."""
    if days is not None and since is not None:
        raise click.UsageError("--days and --since choose the same thing: give one")
    today = day_of(now)
    if since is not None:
        first = day_of(since.replace(tzinfo=UTC).timestamp())
        if first > today:
            raise click.UsageError(f"--since {since:%Y-%m-%d} is in the future")
    else:
        first = today - (days or DEFAULT_DAYS) + 1
    if source is not None and source not in known_platforms():
        known = ", ".join(sorted(known_platforms()))
        raise click.UsageError(f"--source {source!r} is not a platform ({known})")
    return Window(first, today, platform=source, model=model)


def _round(value: float | None, places: int = 1) -> float | None:
    return None if value is None else round(value, places)


def usage_document(usage: Usage) -> dict[str, Any]:
    return {
        "calls": usage.calls,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cached_tokens": usage.cached_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
        "tokens": usage.tokens,
        "cost": round(usage.cost, 6),
        "cost_complete": usage.unpriced_calls == 0,
        "unpriced_calls": usage.unpriced_calls,
        "estimated_calls": usage.estimated_calls,
    }


def group_document(group: Group, *, series: bool = False) -> dict[str, Any]:
    calls = group.usage.calls
    doc: dict[str, Any] = {
        "name": group.name,
        **usage_document(group.usage),
        "latency_ms": {
            "avg": _round(group.latency_ms_total / calls if calls else None),
            "p50": _round(group.p(0.5)),
            "p95": _round(group.p(0.95)),
        },
    }
    if series:
        doc["daily_cost"] = [round(c, 6) for c in group.daily_cost]
        doc["daily_tokens"] = group.daily_tokens
    return doc


def report_document(report: Report) -> dict[str, Any]:
    """The report as one JSON object (its shape is what `--json` promises scripts)."""
    window = report.window
    total = group_document(report.total)
    del total["name"]
    return {
        "window": {
            "from": iso_day(window.first_day),
            "to": iso_day(window.last_day),
            "days": window.days,
            "source": window.platform,
            "model": window.model,
            "timezone": "UTC",
        },
        "totals": total,
        "by_model": [group_document(g, series=True) for g in report.by_model],
        "by_platform": [group_document(g, series=True) for g in report.by_platform],
        "by_kind": [group_document(g) for g in report.by_kind],
        "daily": [
            {"date": iso_day(day), "calls": calls, "tokens": tokens, "cost": round(cost, 6)}
            for day, calls, tokens, cost in zip(
                report.days, report.daily_calls, report.daily_tokens, report.daily_cost, strict=True
            )
        ],
        "heatmap": {
            "weekdays": list(WEEKDAYS),
            "hours_utc": list(range(24)),
            "calls": report.heatmap,
        },
        "top_sessions": [
            {
                "session_id": s.session_id,
                "title": s.title,
                "platform": s.platform,
                "pruned": s.pruned,
                **usage_document(s.usage),
            }
            for s in report.top_sessions
        ],
        "tools": [{"tool": t.tool, "calls": t.calls, "failures": t.failures} for t in report.tools],
        "cron": [
            {"job_id": c.job_id, "name": c.name, **usage_document(c.usage)} for c in report.cron
        ],
    }


@click.command()
@click.option(
    "--days", type=click.IntRange(1, 36_500), help="The last N UTC days, today included [30]."
)
@click.option(
    "--since", type=click.DateTime(["%Y-%m-%d"]), help="From this UTC date (YYYY-MM-DD) on."
)
@click.option("--source", "-s", help="Only calls from this platform (cli, telegram, cron, ...).")
@click.option("--model", "-m", help="Only calls to this model.")
@click.option(
    "--top", default=10, show_default=True, type=click.IntRange(1, 100), help="Sessions listed."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object for scripts.")
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the report, with its charts, to this self-contained HTML file.",
)
@pass_app
@store_command
def insights(
    app: App,
    days: int | None,
    since: datetime | None,
    source: str | None,
    model: str | None,
    top: int,
    as_json: bool,
    html_path: Path | None,
) -> None:
    """Token usage, cost estimates, tool calls and activity, from the usage ledger."""
    window = window_of(app.clock(), days, since, source, model)
    started = time.perf_counter()
    with app.store().read() as conn:
        seen = reads.known_values(conn, "model") if model is not None else []
        if model is not None and model not in seen:
            listed = ", ".join(seen) or "none yet"
            fail(f"no calls to model {model!r} in the usage ledger (models seen: {listed})")
        report = reads.report(conn, window, top=top)
    elapsed = time.perf_counter() - started
    if html_path is not None:
        from producers.cli.insights_html import write_html

        try:
            write_html(report_document(report), html_path)
        except OSError as exc:
            fail(f"cannot write {html_path}: {exc.strerror or exc}")
    if as_json:
        click.echo(json.dumps(report_document(report), ensure_ascii=False))
        return
    from producers.cli.insights_view import show

    show(report_document(report), elapsed=elapsed)
    if html_path is not None:
        click.echo(f"Wrote {html_path}")
