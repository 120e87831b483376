"""Insights benchmark: `hermes insights --days 365` on 1.5M messages and a year of ledger rows.

    python -m bench.insights              # 1.5M messages in 21,000 sessions, one ledger row per
                                          # assistant message (minutes to build)
    python -m bench.insights --quick      # a small store, well within 60 s
    python -m bench.insights --db PATH    # keep the store at PATH; reuse it when it is there

Figures: the report read in-process (open, the six rollup reads, the JSON document, the Rich
rendering to a null terminal), the real command's wall time (`hermes insights --days 365`, a
fresh Python included, and `--json`), the `--html` page, and beside them the plain
alternative on the same file: the same aggregates grouped straight from the ledger rows (what
a report would cost without the rollups). Target: the command ≤ 1 s.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console

from bench.common import ROOT
from bench.corpus import build_store
from producers.cli.insights import report_document
from producers.cli.insights_html import render
from producers.cli.insights_view import show
from shared.db import open_store
from shared.store import insights
from shared.usage import day_of

FULL = {"sessions": 21_000, "messages": 1_500_000}
QUICK = {"sessions": 600, "messages": 40_000}
TARGET_SECONDS = 1.0
SIDECAR = ".bench.json"

# The plain alternative: the report's groupings straight from the ledger's rows.
PLAIN = [
    "SELECT platform, model, kind, count(*), sum(input_tokens), sum(output_tokens),"
    " sum(cached_tokens), sum(cost), sum(latency_ms) FROM usage_ledger WHERE at >= ?"
    " GROUP BY platform, model, kind",
    "SELECT model, latency_ms FROM usage_ledger WHERE at >= ? ORDER BY model, latency_ms",
    "SELECT CAST(at / 86400 AS INTEGER) AS d, model, count(*), sum(input_tokens + output_tokens),"
    " sum(cost) FROM usage_ledger WHERE at >= ? GROUP BY d, model",
    "SELECT CAST(at / 3600 AS INTEGER) % 24 AS h, count(*) FROM usage_ledger WHERE at >= ?"
    " GROUP BY h",
    "SELECT session_id, sum(cost) AS c FROM usage_ledger WHERE at >= ?"
    " GROUP BY session_id ORDER BY c DESC LIMIT 10",
]


def _store(path: Path, size: dict[str, int], seed: int, reuse: bool) -> dict[str, Any]:
    sidecar = Path(f"{path}{SIDECAR}")
    wanted = {**size, "seed": seed}
    if reuse and path.exists() and sidecar.exists():
        meta: dict[str, Any] = json.loads(sidecar.read_text())
        if meta["corpus"] == wanted:
            return {**meta, "reused": True}
    for leftover in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), sidecar):
        leftover.unlink(missing_ok=True)
    print(f"building {size['messages']:,} messages in {size['sessions']:,} sessions at {path} ...")
    until = time.time()
    stats = build_store(
        path, seed=seed, workers=max(1, (os.cpu_count() or 2) - 1), ledger_until=until, **size
    )
    meta = {"corpus": wanted, "build_seconds": round(stats.seconds, 1), "ledger_until": until}
    sidecar.write_text(json.dumps(meta))
    return {**meta, "reused": False}


def _timed(action: Any, runs: int) -> tuple[float, float]:
    """(median, best) seconds of `runs` calls."""
    spent = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        spent.append(time.perf_counter() - started)
    return statistics.median(spent), min(spent)


def _in_process(url: str, days: int) -> tuple[dict[str, Any], Any]:
    store = open_store(url)
    try:
        today = day_of(time.time())
        with store.read() as conn:
            report = insights.report(conn, insights.Window(today - days + 1, today))
        doc = report_document(report)
        show(doc, elapsed=0.0, console=Console(file=io.StringIO(), width=120))
        return doc, report
    finally:
        store.close()


def _command(home: Path, *args: str) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env["HERMES_HOME"] = str(home)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "producers.cli.main", "insights", *args],
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    spent = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"hermes insights failed: {done.stderr.strip()}")
    return spent


def _plain(path: Path, days: int) -> float:
    import sqlite3

    since = time.time() - days * 86_400
    db = sqlite3.connect(path)
    try:
        started = time.perf_counter()
        for sql in PLAIN:
            db.execute(sql, (since,)).fetchall()
        return time.perf_counter() - started
    finally:
        db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small store (< 60 s)")
    parser.add_argument("--db", type=Path, help="build (or reuse) the store at this path")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    size = QUICK if args.quick else FULL
    with tempfile.TemporaryDirectory(prefix="hermes-bench-insights-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        path = args.db or home / "state.db"
        meta = _store(path, size, args.seed, reuse=args.db is not None)
        if args.db is not None:
            (home / "state.db").symlink_to(path.resolve())
        url = f"sqlite:///{path}"
        doc, _ = _in_process(url, 365)  # warm the page cache, as a report after another would
        rows = doc["totals"]["calls"]
        print(
            f"store: {size['messages']:,} messages, {rows:,} ledger rows over 365 days "
            f"({path.stat().st_size / 1e6:,.0f} MB; {'reused' if meta['reused'] else 'built'} "
            f"in {meta['build_seconds']} s)"
        )
        inproc, inproc_best = _timed(lambda: _in_process(url, 365), args.runs)
        print(f"report in-process (open, read, render):  {inproc * 1000:7.1f} ms median")
        command, command_best = _timed(lambda: _command(home, "--days", "365"), args.runs)
        print(f"`hermes insights --days 365` wall:       {command * 1000:7.1f} ms median")
        as_json, _ = _timed(lambda: _command(home, "--days", "365", "--json"), args.runs)
        print(f"`hermes insights --days 365 --json`:     {as_json * 1000:7.1f} ms median")
        startup, _ = _timed(lambda: _command(home, "--help"), args.runs)
        print(f"`hermes insights --help` (start-up only): {startup * 1000:6.1f} ms median")
        html, _ = _timed(lambda: render(doc), 3)
        print(f"--html page built ({len(render(doc)) / 1e6:.1f} MB):       {html * 1000:7.1f} ms")
        plain, _ = _timed(lambda: _plain(path, 365), args.runs)
        print(f"plain: the same groupings over the ledger: {plain * 1000:6.1f} ms median")
        ratio = plain / inproc if inproc else float("inf")
        print(f"rollups vs plain ledger scans: {ratio:.1f}x faster")
        verdict = "meets" if command <= TARGET_SECONDS else "misses"
        print(f"target: the command <= {TARGET_SECONDS:.0f} s -> {verdict} ({command:.2f} s)")
    result = {
        "bench": "insights",
        "messages": size["messages"],
        "ledger_rows": rows,
        "report_ms": round(inproc * 1000, 1),
        "report_best_ms": round(inproc_best * 1000, 1),
        "command_ms": round(command * 1000, 1),
        "command_best_ms": round(command_best * 1000, 1),
        "command_json_ms": round(as_json * 1000, 1),
        "startup_ms": round(startup * 1000, 1),
        "html_ms": round(html * 1000, 1),
        "plain_ledger_ms": round(plain * 1000, 1),
        "plain_over_rollups": round(ratio, 1),
        "target_met": command <= TARGET_SECONDS,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
