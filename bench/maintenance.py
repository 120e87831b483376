"""Maintenance benchmark: the longest turn-write stall while prune, index merge and reclaim run.

    python bench/maintenance.py [--quick] [--messages N] [--sessions N] [--share 0.25] [--keep DIR]

Builds a store with `bench.corpus` (default 1,000,000 messages in 20,000 sessions, over 1 GB;
`--quick` 50,000 / 1,000), picks the retention cutoff so that about `--share` of the messages
sit in sessions ended before it, copies the file, and then on each copy runs the same load of
turn writers (`--writers` processes, each appending one message per `--interval-ms` through
`store.write()` + `append_message`, as a drain does) while maintenance runs:

- ours: `workers.sweeps.prune.sweep` as beat runs it: short delete batches, the FTS5 indexes
  merged in bounded steps, then the space given back by incremental auto-vacuum, a bounded
  step per write transaction (the settings' pacing, or `--step-pages`, `--merge-pages`,
  `--pause-ms`);
- plain: what a store without that does: one DELETE of the same sessions, then 'optimize' of
  both FTS5 indexes and `VACUUM`, on its own sqlite3 connection (busy timeout as ours).

Between them, a control run: the same writers on another copy with no maintenance (as long as
ours took, at most `--control-seconds`), for the stalls the machine itself gives them.

For each: the longest single write (the stall a user's turn would see; ours also per phase),
p99, writes that failed, how long each part took, the bytes given back to the file system
(ours: MB/s, and the share of the pages free after prune and merge that went back), segments
per index, and then, with the writers stopped, search p50/p99 per query class
(`bench.search`'s classes and calls) on the untouched store and on both results. Human lines
go to stdout as it goes (progress to stderr); the last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.maintenance_writers import stall_by_phase, summarise, writers
from bench.store import build, progress, say, workspace
from bench.store import checkpoint as store_checkpoint
from shared.db import sqlite as store_sqlite
from shared.db.engine import open_store
from shared.ports import RecordingWaker
from shared.search.tool import run
from shared.settings import load_settings
from shared.store import reclaim as reclaim_store

TARGETS = {"ours_max_stall_ms": 250.0, "ours_failed_writes": 0, "ours_returned_share": 0.9}
FULL = (20_000, 1_000_000)
QUICK = (1_000, 50_000)
RETENTION_DAYS = 90
# What the control run reports: the stalls this machine gives the writers with no maintenance.
CONTROL_KEYS = ("seconds", "writes", "max_stall_ms", "p99_write_ms", "writes_over_250ms")


# --- the store ------------------------------------------------------------------------------


def checkpoint(path: Path) -> int:
    """Copy the WAL into the file (TRUNCATE) and return the file's size."""
    store_checkpoint(path)
    return path.stat().st_size


def copy_settled(source: Path, target: Path) -> None:
    """Copy a store and flush the copy to disk, so the first checkpoint of the run does not pay
    for writing back a whole freshly copied file (a real state.db has no such backlog)."""
    shutil.copyfile(source, target)
    fd = os.open(target, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def cutoff_for_share(path: Path, share: float) -> tuple[float, int, int, int]:
    """The ended_at before which ended sessions hold `share` of all messages:
    (cutoff, prunable sessions, prunable messages, all messages)."""
    with closing(sqlite3.connect(path)) as conn:
        total = int(conn.execute("SELECT SUM(message_count) FROM sessions").fetchone()[0])
        rows = conn.execute(
            "SELECT ended_at, message_count FROM sessions WHERE ended_at IS NOT NULL "
            "ORDER BY ended_at"
        ).fetchall()
    taken = picked = 0
    cutoff = rows[0][0] if rows else 0.0
    for ended_at, count in rows:
        if taken >= share * total:
            cutoff = ended_at
            break
        taken += int(count)
        picked += 1
        cutoff = ended_at + 0.001
    return cutoff, picked, taken, total


def live_sessions(path: Path, cutoff: float, count: int, seed: int) -> list[str]:
    """Sessions the prune keeps (the writers append to these, as live chats do)."""
    with closing(sqlite3.connect(path)) as conn:
        ids = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM sessions WHERE ended_at IS NULL OR ended_at >= ?", (cutoff,)
            )
        ]
    return random.Random(seed).sample(ids, min(count, len(ids)))


def segments(path: Path) -> dict[str, int]:
    """Segments per FTS5 index (1 when merged)."""
    store = open_store(f"sqlite:///{path}")
    try:
        return reclaim_store.segment_counts(store)
    finally:
        store.close()


# --- the two ways to prune ------------------------------------------------------------------


def ours_settings(home: Path, path: Path, args: argparse.Namespace) -> dict[str, str]:
    env = {
        "HERMES_HOME": str(home),
        "HERMES_DATABASE_URL": f"sqlite:///{path}",
        "HERMES_SESSIONS__AUTO_PRUNE": "true",
        "HERMES_SESSIONS__RETENTION_DAYS": str(RETENTION_DAYS),
    }
    for flag, key in (
        ("step_pages", "VACUUM_STEP_PAGES"),
        ("merge_pages", "INDEX_MERGE_PAGES"),
        ("pause_ms", "VACUUM_PAUSE_MS"),
    ):
        if getattr(args, flag) is not None:
            env[f"HERMES_MAINTENANCE__{key}"] = str(getattr(args, flag))
    return env


def run_ours(path: Path, home: Path, cutoff: float, args: argparse.Namespace) -> dict[str, Any]:
    """The product's sweep, with the settings' (or the flags') pacing."""
    from workers.runtime import build_runtime
    from workers.sweeps import prune

    settings = load_settings(ours_settings(home, path, args))
    pacing = settings.maintenance
    say(
        f"  ours: reclaim {pacing.vacuum_step_pages} pages, merge {pacing.index_merge_pages} "
        f"pages per write; {pacing.vacuum_pause_ms} ms pause"
    )
    # "Now" stands still at retention past the cutoff: the sweep deletes what plain deletes,
    # and never a session the writers append to.
    now = cutoff + RETENTION_DAYS * 86400
    rt = build_runtime(settings, RecordingWaker(), clock=lambda: now)
    started = time.perf_counter()
    try:
        report = prune.sweep(rt, force=True)
    finally:
        rt.close()
    total = time.perf_counter() - started
    merged, reclaimed = report.merged, report.reclaimed
    assert merged is not None and reclaimed is not None, report
    returned = reclaimed.bytes_before - reclaimed.bytes_after
    page = store_sqlite.PAGE_SIZE
    prune_s = max(0.0, total - merged.seconds - reclaimed.seconds)
    return {
        "sessions": report.sessions,
        "messages": report.messages,
        "prune_seconds": round(prune_s, 2),
        "merge_seconds": merged.seconds,
        "merge_steps": merged.steps,
        "segments_before_merge": merged.segments_before,
        "segments_after_merge": merged.segments_after,
        "reclaim_seconds": reclaimed.seconds,
        "free_pages_after_prune_and_merge": reclaimed.free_at_start,
        "pages_returned": reclaimed.pages_freed,
        "returned_share": round(returned / page / max(reclaimed.free_at_start, 1), 3),
        "reclaim_mb_per_s": round(returned / 1e6 / max(reclaimed.seconds, 1e-9), 1),
        "phases": [("prune", prune_s), ("merge", merged.seconds), ("reclaim", reclaimed.seconds)],
    }


def run_plain(path: Path, cutoff: float) -> dict[str, Any]:
    """One DELETE of every prunable session (messages and index rows follow), then 'optimize'
    of both FTS5 indexes, then VACUUM."""
    took: dict[str, float] = {}
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute(f"PRAGMA busy_timeout = {store_sqlite.BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA foreign_keys = ON")
        began = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        gone = conn.execute(
            "DELETE FROM sessions WHERE ended_at IS NOT NULL AND ended_at < ?", (cutoff,)
        ).rowcount
        conn.execute("COMMIT")
        took["delete_seconds"] = time.perf_counter() - began
        began = time.perf_counter()
        for table in store_sqlite.FTS_INDEXES:
            conn.execute(f"INSERT INTO {table}({table}) VALUES ('optimize')")
        took["optimize_seconds"] = time.perf_counter() - began
        began = time.perf_counter()
        conn.execute("VACUUM")
        took["vacuum_seconds"] = time.perf_counter() - began
    return {"sessions": gone, **{k: round(v, 2) for k, v in took.items()}}


def idle(seconds: float) -> dict[str, Any]:
    """No maintenance at all, for the control run."""
    time.sleep(seconds)
    return {}


def measure(
    label: str, path: Path, ids: list[str], args: argparse.Namespace, action: Any
) -> dict[str, Any]:
    size_before = checkpoint(path)
    with writers(path, ids, args.writers, args.interval_ms / 1000) as samples:
        progress(f"  {label}: maintenance running")
        start = time.time()
        detail = action()
        end = time.time()
    size_after = checkpoint(path)
    result = summarise(samples, start, end)
    phases = detail.pop("phases", None)
    if phases:
        result["max_stall_ms_by_phase"] = stall_by_phase(samples, end, phases)
    with closing(sqlite3.connect(path)) as conn:
        result["integrity"] = conn.execute("PRAGMA quick_check").fetchone()[0]
    result.update(
        seconds=round(end - start, 2),
        bytes_before=size_before,
        bytes_after=size_after,
        bytes_returned=size_before - size_after,
        segments_after=segments(path),
        **detail,
    )
    say(
        f"{label}: {result['seconds']} s; longest write {result['max_stall_ms']} ms, p99 "
        f"{result['p99_write_ms']} ms over {result['writes']} writes, {result['failed_writes']} "
        f"failed; {size_before / 1e6:,.0f} MB -> {size_after / 1e6:,.0f} MB; "
        f"segments {result['segments_after']}"
    )
    say(f"  {json.dumps({k: v for k, v in result.items() if k not in ('errors',)})}")
    return result


def measure_search(path: Path, queries: dict[str, list[Any]], label: str) -> dict[str, Any]:
    """p50/p99 per query class through the agent tool's entry (bench/search.py's calls)."""
    from bench import search

    store = open_store(f"sqlite:///{path}")
    try:
        # Every query once first, unmeasured: each store is timed with its pages in the cache,
        # whichever was read last.
        for calls in queries.values():
            for args in calls:
                run(store, args, None)
        say(f"search on {label}:")
        report = search._measure(store, queries)
    finally:
        store.close()
    return {name: {"p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"]} for name, r in report.items()}


def draw_queries(path: Path, n: int, seed: int) -> dict[str, list[Any]]:
    from bench import search

    with closing(sqlite3.connect(path)) as conn:
        return search._queries(conn, n, seed)


# --- the run --------------------------------------------------------------------------------


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small store (< 60 s in all)")
    parser.add_argument("--sessions", type=int, help="sessions to build")
    parser.add_argument("--messages", type=int, help="messages to build")
    parser.add_argument("--share", type=float, default=0.25, help="share of messages to prune")
    parser.add_argument("--writers", type=int, default=2, help="turn-writer processes")
    parser.add_argument("--interval-ms", type=float, default=10.0, help="pause between writes")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", type=Path, help="build in (and keep) this directory")
    parser.add_argument("--reuse", action="store_true", help="reuse origin.db under --keep")
    parser.add_argument("--no-plain", action="store_true", help="skip the plain VACUUM run")
    parser.add_argument("--step-pages", type=int, help="maintenance.vacuum_step_pages")
    parser.add_argument("--merge-pages", type=int, help="maintenance.index_merge_pages")
    parser.add_argument("--pause-ms", type=float, help="maintenance.vacuum_pause_ms")
    parser.add_argument("--queries", type=int, default=100, help="search queries per class")
    parser.add_argument("--no-search", action="store_true", help="skip the search timings")
    parser.add_argument(
        "--control-seconds",
        type=float,
        default=120.0,
        help="at most this long, the writers alone (the machine's own stalls)",
    )
    args = parser.parse_args(argv)
    default_sessions, default_messages = QUICK if args.quick else FULL
    args.sessions = args.sessions or default_sessions
    args.messages = args.messages or default_messages
    if args.reuse and args.keep is None:
        parser.error("--reuse needs --keep")
    if not 0 < args.share < 1:
        parser.error("--share must be between 0 and 1")
    return args


def searches(args: argparse.Namespace, origin: Path, ours: Path, plain: Path) -> dict[str, Any]:
    """Search p50/p99 per class, the writers stopped: the untouched store, and right after
    each way of maintenance (the same queries, drawn from what the prune kept)."""
    queries = draw_queries(ours, max(50, args.queries), args.seed + 10)
    out: dict[str, Any] = {
        "before": measure_search(origin, queries, "the untouched store"),
        "ours": measure_search(ours, queries, "ours after maintenance"),
    }
    if not args.no_plain:
        out["plain"] = measure_search(plain, queries, "plain after maintenance")
        out["p99_ratio_ours_over_plain"] = {
            name: round(value["p99_ms"] / max(out["plain"][name]["p99_ms"], 1e-3), 2)
            for name, value in out["ours"].items()
        }
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    started = time.perf_counter()
    result: dict[str, Any] = {"quick": args.quick}
    with workspace(args.keep) as workdir:
        origin = workdir / "origin.db"
        if args.reuse and origin.exists():
            say(f"reusing {origin}")
        else:
            for stale in workdir.glob("*.db*"):
                stale.unlink()
            build(origin, args.sessions, args.messages, args.seed, workers=1)
        size = checkpoint(origin)
        ours_path, plain_path = workdir / "state.db", workdir / "plain.db"
        for stale in [
            *workdir.glob("state.db*"),
            *workdir.glob("plain.db*"),
            *workdir.glob("control.db*"),
        ]:
            stale.unlink()
        copy_settled(origin, ours_path)
        cutoff, n_sessions, n_messages, total = cutoff_for_share(ours_path, args.share)
        say(
            f"store: {size / 1e6:,.0f} MB, {total:,} messages; prunable: {n_sessions:,} sessions,"
            f" {n_messages:,} messages ({n_messages / total:.0%})"
        )
        result.update(
            db_bytes=size,
            messages=total,
            prunable_sessions=n_sessions,
            prunable_messages=n_messages,
            prunable_share=round(n_messages / total, 3),
        )
        ids = live_sessions(ours_path, cutoff, 200, args.seed)
        if not args.no_plain:
            copy_settled(origin, plain_path)
        home = workdir / "home"
        home.mkdir(exist_ok=True)
        ours = measure(
            "ours (batched prune + index merge + incremental reclaim)",
            ours_path,
            ids,
            args,
            lambda: run_ours(ours_path, home, cutoff, args),
        )
        result.update({f"ours_{k}": v for k, v in ours.items()})
        control_path = workdir / "control.db"
        copy_settled(origin, control_path)
        quiet = min(ours["seconds"], args.control_seconds)
        control = measure(
            "control (the same writers, no maintenance)",
            control_path,
            ids,
            args,
            lambda: idle(quiet),
        )
        for leftover in workdir.glob("control.db*"):
            leftover.unlink()
        result.update({f"control_{k}": control[k] for k in CONTROL_KEYS})
        if not args.no_plain:
            plain = measure(
                "plain (one DELETE + optimize + VACUUM)",
                plain_path,
                ids,
                args,
                lambda: run_plain(plain_path, cutoff),
            )
            result.update({f"plain_{k}": v for k, v in plain.items()})
            result["stall_ratio_plain_over_ours"] = round(
                plain["max_stall_ms"] / max(ours["max_stall_ms"], 1e-3), 1
            )
            result["plain_vacuum_mb_per_s"] = round(
                plain["bytes_returned"] / 1e6 / max(plain["vacuum_seconds"], 1e-9), 1
            )
            say(
                f"longest write: ours {ours['max_stall_ms']:.0f} ms (no maintenance: "
                f"{control['max_stall_ms']:.0f} ms), plain {plain['max_stall_ms']:.0f} ms "
                f"({result['stall_ratio_plain_over_ours']}x); "
                f"failed writes {ours['failed_writes']} vs {plain['failed_writes']}; reclaim "
                f"{ours['reclaim_mb_per_s']} MB/s ({ours['returned_share']:.0%} of the freed "
                f"pages), VACUUM {result['plain_vacuum_mb_per_s']} MB/s"
            )
        if not args.no_search:
            result["search"] = searches(args, origin, ours_path, plain_path)
    result["total_seconds"] = round(time.perf_counter() - started, 1)
    result["targets"] = TARGETS
    result["targets_met"] = {
        "ours_max_stall_ms": result["ours_max_stall_ms"] <= TARGETS["ours_max_stall_ms"],
        "ours_failed_writes": result["ours_failed_writes"] == 0,
        "ours_returned_share": result["ours_returned_share"] >= TARGETS["ours_returned_share"],
    }
    print(json.dumps(result, ensure_ascii=False), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
