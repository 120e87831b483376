"""`hermes insights`: totals that match a hand count, the window and filters, `--json`'s shape,
the terminal's charts, the `--html` page (parsed, its charts present), and bad input."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from shared.db import Store
from shared.pipeline import cron
from shared.pricing import Pricing
from shared.settings import Settings
from shared.store import usage
from shared.store.sessions import create_session
from shared.usage import ModelCall, ToolUse
from tests.integration.test_cli_sessions_support import DAY, NOW, hermes, invoke

pytestmark = pytest.mark.both_databases

# NOW is Sunday 2025-06-15 15:06:40 UTC.
HOUR = 3_600.0


def call(
    kind: str, model: str, at: float, tin: int, tout: int, ms: float, **extra: Any
) -> ModelCall:
    return ModelCall(kind, model, at, tin, tout, ms, **extra)


@pytest.fixture
def ledger(store: Store) -> Store:
    """A hand-counted ledger: three sessions, one pruned-looking, one cron job, a tool failure."""
    with store.write() as conn:
        create_session(
            conn,
            session_id="20250615_100000_aaaaaa",
            source="cli",
            now=NOW - DAY,
            title="budget talk",
        )
        job = cron.add_job(
            conn,
            schedule="0 9 * * *",
            prompt="daily digest",
            timezone="UTC",
            name="digest",
            now=NOW - 30 * DAY,
        )
        pricing = Pricing()
        usage.record(
            conn,
            [
                call(
                    "tool_round",
                    "gpt-4o",
                    NOW - HOUR,
                    1_000,
                    100,
                    800.0,
                    tools=(ToolUse("memory"), ToolUse("memory", True)),
                ),
                call("reply", "gpt-4o", NOW - HOUR, 2_000, 300, 1_600.0, cached_tokens=1_000),
            ],
            usage.Where("cli", "20250615_100000_aaaaaa"),
            pricing,
        )
        usage.record(
            conn,
            [call("reply", "gpt-4o-mini", NOW - 2 * DAY, 4_000, 500, 400.0)],
            usage.Where("telegram", "20250613_100000_bbbbbbbb"),
            pricing,
        )
        usage.record(
            conn,
            [call("reply", "local-llama", NOW - 3 * DAY, 700, 70, 5_000.0, estimated=True)],
            usage.Where("cron", "20250612_090000_cccccc", cron_job=job.id),
            pricing,
        )
        usage.record(  # outside a 7-day window
            conn,
            [call("reply", "gpt-4o", NOW - 10 * DAY, 10_000, 1_000, 900.0)],
            usage.Where("slack", "20250605_100000_dddddddd"),
            pricing,
        )
    return store


COST_CLI = ((1_000 * 2.5 + 100 * 10.0) + (1_000 * 2.5 + 1_000 * 1.25 + 300 * 10.0)) / 1e6
COST_TELEGRAM = (4_000 * 0.15 + 500 * 0.60) / 1e6


def as_json(settings: Settings, *args: str) -> dict[str, Any]:
    result = invoke(settings, ["insights", "--json", *args])
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.output)
    return doc


def test_totals_match_a_hand_count(settings: Settings, ledger: Store) -> None:
    doc = as_json(settings, "--days", "7")
    t = doc["totals"]
    assert (t["calls"], t["input_tokens"], t["output_tokens"]) == (4, 7_700, 970)
    assert (t["cached_tokens"], t["tokens"]) == (1_000, 8_670)
    assert t["cost"] == pytest.approx(COST_CLI + COST_TELEGRAM, abs=1e-6)
    assert (t["unpriced_calls"], t["estimated_calls"], t["cost_complete"]) == (1, 1, False)
    by_model = {g["name"]: g for g in doc["by_model"]}
    assert list(by_model) == ["gpt-4o", "gpt-4o-mini", "local-llama"]  # by cost
    assert by_model["gpt-4o"]["calls"] == 2
    assert by_model["local-llama"]["cost_complete"] is False
    assert {g["name"]: g["calls"] for g in doc["by_platform"]} == {
        "cli": 2,
        "telegram": 1,
        "cron": 1,
    }
    assert {g["name"]: g["calls"] for g in doc["by_kind"]} == {"reply": 3, "tool_round": 1}
    # 800 ms and 1.6 s are in different √2 buckets: p50 lands in the lower, p95 in the upper.
    latency = by_model["gpt-4o"]["latency_ms"]
    assert latency["avg"] == 1_200.0
    assert (
        800 / 1.42 <= latency["p50"] <= 800 * 1.42
        and 1_600 / 1.42 <= latency["p95"] <= 1_600 * 1.42
    )


def test_json_shape_window_days_heatmap_sessions_tools_and_cron(
    settings: Settings, ledger: Store
) -> None:
    doc = as_json(settings, "--days", "7")
    assert set(doc) == {
        "window", "totals", "by_model", "by_platform", "by_kind", "daily", "heatmap",
        "top_sessions", "tools", "cron",
    }  # fmt: skip
    assert doc["window"] == {
        "from": "2025-06-09", "to": "2025-06-15", "days": 7, "source": None, "model": None,
        "timezone": "UTC",
    }  # fmt: skip
    assert [d["date"] for d in doc["daily"]][-3:] == ["2025-06-13", "2025-06-14", "2025-06-15"]
    assert [d["calls"] for d in doc["daily"]] == [0, 0, 0, 1, 1, 0, 2]
    assert len(doc["by_model"][0]["daily_cost"]) == 7
    grid = doc["heatmap"]["calls"]
    assert len(grid) == 7 and all(len(row) == 24 for row in grid)
    assert grid[6][14] == 2  # Sunday 14:xx UTC: the two cli calls
    assert sum(map(sum, grid)) == 4
    sessions = doc["top_sessions"]
    assert [s["session_id"] for s in sessions][:2] == [
        "20250615_100000_aaaaaa",
        "20250613_100000_bbbbbbbb",
    ]
    assert sessions[0]["title"] == "budget talk" and not sessions[0]["pruned"]
    assert sessions[1]["pruned"]  # spending outlives its session
    assert doc["tools"] == [{"tool": "memory", "calls": 2, "failures": 1}]
    (job,) = doc["cron"]
    assert (job["name"], job["calls"], job["tokens"]) == ("digest", 1, 770)


def test_since_source_and_model_filters(settings: Settings, ledger: Store) -> None:
    assert as_json(settings, "--since", "2025-06-01")["totals"]["calls"] == 5
    assert as_json(settings)["window"]["days"] == 30  # the default window
    only = as_json(settings, "--days", "30", "--source", "slack")
    assert only["totals"]["input_tokens"] == 10_000 and only["window"]["source"] == "slack"
    model = as_json(settings, "--model", "gpt-4o", "--days", "7")
    assert model["totals"]["calls"] == 2 and [g["name"] for g in model["by_model"]] == ["gpt-4o"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--days", "7", "--since", "2025-06-01"], "--days and --since"),
        (["--since", "2031-01-01"], "in the future"),
        (["--source", "myspace"], "is not a platform"),
        (["--model", "gpt-9"], "no calls to model 'gpt-9'"),
        (["--days", "0"], "--days"),
        (["--since", "15/06/2025"], "--since"),
    ],
)
def test_bad_input_is_one_line_and_non_zero(
    settings: Settings, ledger: Store, args: list[str], says: str
) -> None:
    result = invoke(settings, ["insights", *args])
    assert result.exit_code != 0
    assert says in result.output


def test_terminal_report_draws_tables_bars_and_the_heatmap(
    settings: Settings, ledger: Store
) -> None:
    result = invoke(settings, ["insights", "--days", "7"])
    assert result.exit_code == 0, result.output
    out = result.output
    expected = (
        "By model", "By platform", "By call kind", "Top sessions by cost", "Tool calls",
        "Cron jobs' spend", "Calls by hour (UTC) and weekday", "gpt-4o-mini", "digest",
        "budget talk", "(pruned)", "█",
    )  # fmt: skip
    for text in expected:
        assert text in out, text
    assert "1 call to models without a price" in out


def test_empty_ledger_says_so(settings: Settings, store: Store) -> None:
    result = invoke(settings, ["insights"])
    assert result.exit_code == 0 and "No model calls were recorded" in result.output


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.charts: dict[str, Any] = {}
        self.divs: set[str] = set()
        self.sources: list[str] = []
        self.scripts: list[str] = []
        self._chart: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        for key in ("src", "href"):
            if named.get(key):
                self.sources.append(str(named[key]))
        if tag == "div" and named.get("class") == "chart":
            self.divs.add(str(named["id"]))
        self._chart = (
            str(named["data-chart"]) if tag == "script" and "data-chart" in named else None
        )

    def handle_data(self, data: str) -> None:
        if self._chart is not None:
            self.charts[self._chart] = json.loads(data)
            self._chart = None
        else:
            self.scripts.append(data)


def test_html_page_is_self_contained_and_holds_the_charts(
    settings: Settings, ledger: Store, tmp_path: Path
) -> None:
    page = tmp_path / "report.html"
    result = invoke(settings, ["insights", "--days", "7", "--html", str(page)])
    assert result.exit_code == 0, result.output
    parser = _Page()
    parser.feed(page.read_text(encoding="utf-8"))
    assert parser.sources == []  # nothing fetched from anywhere
    assert any("plotly" in s.lower() and len(s) > 1_000_000 for s in parser.scripts)  # inlined
    expected = {"daily", "heatmap", "models", "cost", "latency", "platforms", "kinds", "tools"}
    assert set(parser.charts) == {f"chart-{name}" for name in expected} == parser.divs
    daily = parser.charts["chart-daily"]["data"]
    assert {trace["name"] for trace in daily} == {"gpt-4o", "gpt-4o-mini", "local-llama"}
    assert all(trace["type"] == "bar" and len(trace["x"]) == 7 for trace in daily)
    assert sum(sum(trace["y"]) for trace in daily) == pytest.approx(
        COST_CLI + COST_TELEGRAM, abs=1e-6
    )
    heat = parser.charts["chart-heatmap"]["data"][0]
    assert heat["type"] == "heatmap" and heat["z"][6][14] == 2
    tools = {t["name"]: t["y"] for t in parser.charts["chart-tools"]["data"]}
    assert tools == {"ok": [1], "failed": [1]}
    assert "budget talk" in page.read_text(encoding="utf-8")


def test_html_to_an_unwritable_place_fails_clearly(
    settings: Settings, ledger: Store, tmp_path: Path
) -> None:
    result = invoke(settings, ["insights", "--html", str(tmp_path / "missing" / "r.html")])
    assert result.exit_code != 0 and "cannot write" in result.output


def test_the_real_command_prints_json(hermes_env: dict[str, str], ledger: Store) -> None:
    done = hermes(hermes_env, "insights", "--json", "--since", "2025-06-01")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["totals"]["calls"] == 5
