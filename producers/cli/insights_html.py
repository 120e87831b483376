"""`hermes insights --html FILE`: the report as one self-contained page with plotly charts.

plotly.js is inlined once (no network needed to open the page, mail it as it is); each chart is
a `<script type="application/json" data-chart>` holding its figure (data and layout), drawn by
a few lines of script at the end, so the numbers behind every chart can be read from the file.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from producers.cli.insights_view import cost_of, millis, money, tokens
from shared.wording import plural

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222}
h1{margin:0 0 4px}.sub{color:#666;margin-bottom:16px}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin-bottom:16px}
.card{border:1px solid #ddd;border-radius:8px;padding:10px 14px;min-width:130px}
.card b{display:block;font-size:1.4em}.card span{color:#666;font-size:.85em}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:16px}
.chart{border:1px solid #eee;border-radius:8px;min-height:340px}
table{border-collapse:collapse;margin:8px 0 24px;font-size:.9em}
th,td{border-bottom:1px solid #eee;padding:4px 10px;text-align:right}
th:first-child,td:first-child,td.text{text-align:left}.note{color:#a60}
"""
BOOT = """
document.querySelectorAll('script[data-chart]').forEach(function (el) {
  var fig = JSON.parse(el.textContent);
  Plotly.newPlot(el.dataset.chart, fig.data, fig.layout, {displaylogo: false, responsive: true});
});
"""
LAYOUT: dict[str, Any] = {
    "template": "plotly_white",
    "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
    "height": 340,
}


def _figure(title: str, traces: list[Any], **layout: Any) -> go.Figure:
    figure = go.Figure(data=traces)
    figure.update_layout(title=title, **{**LAYOUT, **layout})
    return figure


def charts(doc: dict[str, Any]) -> dict[str, go.Figure]:
    """Every chart of the page by its id."""
    dates = [d["date"] for d in doc["daily"]]
    priced = doc["totals"]["cost"] > 0
    field, unit = ("daily_cost", "cost ($)") if priced else ("daily_tokens", "tokens")
    models = doc["by_model"]
    names = [g["name"] for g in models]
    weekdays = doc["heatmap"]["weekdays"]
    figures = {
        "daily": _figure(
            f"Activity by day: {unit}, by model",
            [go.Bar(name=g["name"], x=dates, y=g[field]) for g in models],
            barmode="stack",
        ),
        "heatmap": _figure(
            "Calls by hour (UTC) and weekday",
            [
                go.Heatmap(
                    z=doc["heatmap"]["calls"],
                    x=[f"{h:02d}" for h in doc["heatmap"]["hours_utc"]],
                    y=weekdays,
                    colorscale="YlGnBu",
                    hovertemplate="%{y} %{x}:00 UTC: %{z} calls<extra></extra>",
                )
            ],
            yaxis={"autorange": "reversed"},
        ),
        "models": _figure(
            "Tokens by model",
            [
                go.Bar(
                    name="input",
                    x=names,
                    y=[g["input_tokens"] - g["cached_tokens"] for g in models],
                ),
                go.Bar(name="cached input", x=names, y=[g["cached_tokens"] for g in models]),
                go.Bar(name="output", x=names, y=[g["output_tokens"] for g in models]),
            ],
            barmode="stack",
        ),
        "cost": _figure(
            "Cost by model ($)",
            [go.Bar(x=names, y=[g["cost"] for g in models], marker_color="#2a9d8f")],
        ),
        "latency": _figure(
            "Latency by model (ms)",
            [
                go.Bar(name="p50", x=names, y=[g["latency_ms"]["p50"] for g in models]),
                go.Bar(name="p95", x=names, y=[g["latency_ms"]["p95"] for g in models]),
            ],
            barmode="group",
        ),
        "platforms": _figure(
            f"By platform: {unit}",
            [go.Bar(name=g["name"], x=dates, y=g[field]) for g in doc["by_platform"]],
            barmode="stack",
        ),
        "kinds": _figure(
            "Calls by kind",
            [go.Bar(x=[g["name"] for g in doc["by_kind"]], y=[g["calls"] for g in doc["by_kind"]])],
        ),
    }
    if doc["tools"]:
        tools = doc["tools"]
        figures["tools"] = _figure(
            "Tool calls",
            [
                go.Bar(
                    name="ok",
                    x=[t["tool"] for t in tools],
                    y=[t["calls"] - t["failures"] for t in tools],
                ),
                go.Bar(
                    name="failed", x=[t["tool"] for t in tools], y=[t["failures"] for t in tools]
                ),
            ],
            barmode="stack",
        )
    return figures


def _cell(value: Any, *, text: bool = False) -> str:
    css = ' class="text"' if text else ""
    return f"<td{css}>{html.escape(str(value))}</td>"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(f"<tr>{''.join(row)}</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _tables(doc: dict[str, Any]) -> str:
    parts = []
    for dim, heading in (("by_model", "Model"), ("by_platform", "Platform"), ("by_kind", "Kind")):
        rows = [
            [
                _cell(g["name"], text=True),
                _cell(f"{g['calls']:,}"),
                _cell(tokens(g["input_tokens"])),
                _cell(tokens(g["cached_tokens"])),
                _cell(tokens(g["output_tokens"])),
                _cell(cost_of(g)),
                _cell(millis(g["latency_ms"]["p50"])),
                _cell(millis(g["latency_ms"]["p95"])),
            ]
            for g in doc[dim]
        ]
        parts.append(f"<h2>By {heading.lower()}</h2>")
        headers = [heading, "Calls", "Input", "Cached", "Output", "Cost", "p50", "p95"]
        parts.append(_table(headers, rows))
    if doc["top_sessions"]:
        rows = [
            [
                _cell(s["session_id"], text=True),
                _cell("(pruned)" if s["pruned"] else (s["title"] or ""), text=True),
                _cell(s["platform"], text=True),
                _cell(f"{s['calls']:,}"),
                _cell(tokens(s["tokens"])),
                _cell(cost_of(s)),
            ]
            for s in doc["top_sessions"]
        ]
        parts.append("<h2>Top sessions by cost</h2>")
        parts.append(_table(["Session", "Title", "Source", "Calls", "Tokens", "Cost"], rows))
    if doc["cron"]:
        rows = [
            [
                _cell(c["name"] or f"{c['job_id']} (removed)", text=True),
                _cell(f"{c['calls']:,}"),
                _cell(tokens(c["tokens"])),
                _cell(cost_of(c)),
            ]
            for c in doc["cron"]
        ]
        parts.append("<h2>Cron jobs' spend</h2>")
        parts.append(_table(["Job", "Calls", "Tokens", "Cost"], rows))
    return "\n".join(parts)


def _cards(doc: dict[str, Any]) -> str:
    t = doc["totals"]
    cards = [
        (money(t["cost"], t["cost_complete"]), "estimated cost"),
        (f"{t['calls']:,}", "model calls"),
        (tokens(t["input_tokens"]), f"input tokens ({tokens(t['cached_tokens'])} cached)"),
        (tokens(t["output_tokens"]), "output tokens"),
        (millis(t["latency_ms"]["p50"]), f"latency p50 (p95 {millis(t['latency_ms']['p95'])})"),
    ]
    body = "".join(
        f'<div class="card"><b>{html.escape(v)}</b><span>{html.escape(k)}</span></div>'
        for v, k in cards
    )
    note = ""
    if t["unpriced_calls"]:
        note = (
            f'<p class="note">{plural(t["unpriced_calls"], "call")} went to models without a '
            "price; their cost is not included (set pricing: in config.yaml).</p>"
        )
    return f'<div class="cards">{body}</div>{note}'


def _json_script(chart_id: str, figure: go.Figure) -> str:
    data = pio.to_json(figure, validate=False, pretty=False).replace("</", "<\\/")
    return f'<script type="application/json" data-chart="chart-{chart_id}">{data}</script>'


def render(doc: dict[str, Any]) -> str:
    w = doc["window"]
    scope = "".join(f", {k} {html.escape(str(w[k]))}" for k in ("source", "model") if w[k])
    figures = charts(doc)
    divs = "".join(f'<div class="chart" id="chart-{name}"></div>' for name in figures)
    data = "\n".join(_json_script(name, figure) for name, figure in figures.items())
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>hermes insights {w['from']} – {w['to']}</title><style>{STYLE}</style>"
        f"<script>{get_plotlyjs()}</script></head><body>"
        f"<h1>hermes insights</h1><div class='sub'>{w['from']} → {w['to']} "
        f"({w['days']} days, UTC{scope})</div>"
        f"{_cards(doc)}<div class='grid'>{divs}</div>{_tables(doc)}\n{data}\n"
        f"<script>{BOOT}</script></body></html>\n"
    )


def write_html(doc: dict[str, Any], path: Path) -> None:
    """Write the page to `path` (through a temporary file: a reader never sees half of it)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(render(doc), encoding="utf-8")
    partial.replace(path)
