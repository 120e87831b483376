"""Store benchmark: build a large state.db, then time the real code paths at that size.

    python bench/store.py [--quick] [--sessions N] [--messages N] [--keep PATH] [--reuse]

Builds a store of `--messages` messages in `--sessions` sessions with `bench.corpus` (default
1,000,000 / 20,000; `--quick` 40,000 / 800), then measures, with the functions the product
uses:

- appends: `messages.append_message` inside `store.write()`, one transaction each, into random
  existing sessions; p50 / p99 / max wall time (and CPU time, which the machine's noise does not
  inflate). The same appends go, interleaved, into a *bare* copy of the store (same tables and
  rows, no FTS5 and no counter triggers), so the overhead of our indexing is a ratio measured
  under the same noise. Then as many appends again beside a process that checkpoints the WAL
  (PASSIVE, every 100 ms), the way a maintenance loop would: `fleet_append_*`;
- `session_listing.list_sessions` (newest activity first) and `.stats`, each against the plain
  alternative (aggregate over `messages`), which is what a store without the kept column,
  index and counters has to do;
- export: `portability.export_sessions` + `encode_line` to a JSONL file, as
  `hermes sessions export` does; messages per second;
- size: state.db + -wal after a TRUNCATE checkpoint, divided by the message count, with the
  per-table/index breakdown from the `dbstat` virtual table; FTS5 segment counts and a few
  query timings, so an index left unmerged would show.

Human-readable lines go to stdout as it goes (progress to stderr); the last line printed is
one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import corpus
from bench.common import drop_bench_schemas, ms
from bench.common import quantile as pct
from bench.store_appends import measure_appends, measure_fleet_appends
from bench.store_postgres import copy_corpus, pending_sweep
from shared.db import migrate, schema
from shared.db import sqlite as store_sqlite
from shared.db.engine import Store, connect, open_store
from shared.db.schema import metadata
from shared.store.session_listing import list_sessions, stats

TARGETS = {
    "append_p99_ms": 5.0,
    "append_max_ms": 100.0,
    "list_ms": 10.0,
    "stats_ms": 200.0,
    "bytes_per_message": 1200.0,
}
FULL = (20_000, 1_000_000)
QUICK = (800, 40_000)


def say(line: str) -> None:
    print(line, flush=True)


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def repeat(action: Callable[[], Any], times: int) -> list[float]:
    spent = []
    for _ in range(times):
        started = time.perf_counter()
        action()
        spent.append(time.perf_counter() - started)
    return spent


# --- the store and its bare twin ------------------------------------------------------------


def build(path: Path, sessions: int, messages: int, seed: int, workers: int) -> float:
    last = [0.0]

    def report(done: int, total: int) -> None:
        now = time.perf_counter()
        if now - last[0] > 5 or done == total:
            last[0] = now
            progress(f"  built {done:,}/{total:,} messages")

    built = corpus.build_store(
        path, sessions=sessions, messages=messages, seed=seed, workers=workers, progress=report
    )
    rate = built.messages / built.seconds
    content = built.content_bytes / built.messages
    cjk = built.cjk_messages / built.messages
    say(
        f"built {built.sessions:,} sessions / {built.messages:,} messages in "
        f"{built.seconds:.1f} s ({rate:,.0f} msg/s); content {content:.0f} B/msg, "
        f"{cjk:.1%} CJK, roles {built.by_role}"
    )
    return built.seconds


def checkpoint(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout = {store_sqlite.BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def make_bare(store_path: Path, bare_path: Path) -> None:
    """The same sessions and messages in the same tables, without FTS5 or counter triggers."""
    with closing(sqlite3.connect(store_path)) as source:
        page_size = source.execute("PRAGMA page_size").fetchone()[0]
    with closing(sqlite3.connect(bare_path, isolation_level=None)) as raw:
        raw.execute(f"PRAGMA page_size = {page_size}")
        raw.execute("PRAGMA journal_mode = WAL")
        raw.execute("CREATE TABLE alembic_version (version_num TEXT PRIMARY KEY)")
        raw.execute("INSERT INTO alembic_version VALUES (?)", (migrate.HEAD,))
    bare = connect(f"sqlite:///{bare_path}")
    try:
        metadata.create_all(bare.engine)  # tables and indexes only: no FTS, no triggers
    finally:
        bare.close()
    with closing(sqlite3.connect(bare_path, isolation_level=None)) as raw:
        raw.execute("ATTACH DATABASE ? AS src", (str(store_path),))
        raw.execute("BEGIN IMMEDIATE")
        for table in (schema.sessions, schema.messages):
            names = ", ".join(column.name for column in table.columns)
            raw.execute(f"INSERT INTO {table.name} ({names}) SELECT {names} FROM src.{table.name}")
        raw.execute("COMMIT")
        raw.execute("DETACH DATABASE src")
    checkpoint(bare_path)


# --- reads ----------------------------------------------------------------------------------


def measure_reads(store: Store, repeats: int) -> dict[str, Any]:
    def listing(source: str | None = None) -> None:
        with store.read() as conn:
            rows, _ = list_sessions(conn, source=source, limit=20)
            assert len(rows) == 20

    def counts() -> None:
        with store.read() as conn:
            stats(conn)

    def plain_listing() -> None:
        with store.read() as conn:
            conn.exec_driver_sql(
                "SELECT session_id, MAX(timestamp) AS last FROM messages GROUP BY session_id "
                "ORDER BY last DESC LIMIT 20"
            ).all()

    def plain_counts() -> None:
        with store.read() as conn:
            conn.exec_driver_sql(
                "SELECT s.source, COUNT(DISTINCT s.id), COUNT(m.id) FROM sessions AS s "
                "LEFT JOIN messages AS m ON m.session_id = s.id GROUP BY s.source"
            ).all()

    listing()
    counts()  # warm the connection pool and the statement caches
    list_times = repeat(listing, repeats)
    source_times = repeat(lambda: listing("telegram"), repeats)
    stats_times = repeat(counts, repeats)
    plain_list = repeat(plain_listing, 3)
    plain_stats = repeat(plain_counts, 3)
    return {
        "list_ms": ms(statistics.median(list_times)),
        "list_p99_ms": ms(pct(list_times, 0.99)),
        "list_source_ms": ms(statistics.median(source_times)),
        "stats_ms": ms(statistics.median(stats_times)),
        "stats_p99_ms": ms(pct(stats_times, 0.99)),
        "plain_list_ms": ms(statistics.median(plain_list)),
        "plain_stats_ms": ms(statistics.median(plain_stats)),
    }


def measure_search(path: Path) -> dict[str, Any]:
    """FTS5 health: segments per index and a few MATCH timings (an unmerged index is slow)."""
    conn = sqlite3.connect(path)
    try:
        words = corpus.vocabulary().words
        queries = {
            "common": f'"{words[0]} {words[1]}"',
            "mid": words[400],
            "rare": words[30_000],
            "and3": f"{words[150]} {words[600]} {words[2000]}",
            "prefix": words[700][:4] + "*",
        }
        result: dict[str, Any] = {}
        for table in ("messages_fts", "messages_cjk"):
            exists = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE name = ?", (f"{table}_idx",)
            ).fetchone()
            if exists:
                result[f"{table}_segments"] = conn.execute(
                    f"SELECT COUNT(DISTINCT segid) FROM {table}_idx"
                ).fetchone()[0]

        def search(query: str) -> None:
            conn.execute(
                "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rank LIMIT 20",
                (query,),
            ).fetchall()

        for name, query in queries.items():
            spent = repeat(partial(search, query), 5)
            result[f"fts_{name}_ms"] = ms(statistics.median(spent))
        return result
    finally:
        conn.close()


def portable_export(store: Store, out: Path) -> int:
    """`hermes sessions export`'s loop: every session with its messages, one JSON line each."""
    try:
        from shared.store.portability import encode_line, export_sessions
    except ImportError:  # pragma: no cover - until portability.py lands
        return simple_export(store, out)
    count = 0
    with store.read() as conn, out.open("w", encoding="utf-8") as handle:
        for doc in export_sessions(conn):
            handle.write(encode_line(doc) + "\n")
            count += len(doc["messages"])
    return count


def simple_export(store: Store, out: Path) -> int:
    count = 0
    with store.read() as conn, out.open("w", encoding="utf-8") as handle:
        ids = [row[0] for row in conn.exec_driver_sql("SELECT id FROM sessions ORDER BY id")]
        for session_id in ids:
            session = conn.exec_driver_sql("SELECT * FROM sessions WHERE id = ?", (session_id,))
            doc = dict(session.mappings().one())
            rows = conn.exec_driver_sql(
                "SELECT * FROM messages WHERE session_id = ? ORDER BY id", (session_id,)
            )
            doc["messages"] = [dict(row) for row in rows.mappings()]
            handle.write(json.dumps(doc, ensure_ascii=False) + "\n")
            count += len(doc["messages"])
    return count


def measure_export(store: Store, workdir: Path) -> dict[str, Any]:
    out = workdir / "export.jsonl"
    started = time.perf_counter()
    exported = portable_export(store, out)
    spent = time.perf_counter() - started
    size = out.stat().st_size
    out.unlink()
    return {
        "export_messages": exported,
        "export_seconds": round(spent, 2),
        "export_messages_per_s": round(exported / spent),
        "export_bytes_per_message": round(size / max(exported, 1)),
    }


def measure_size(path: Path) -> dict[str, Any]:
    checkpoint(path)
    messages = count_messages(path)
    files = [path, Path(f"{path}-wal")]
    db_bytes = sum(f.stat().st_size for f in files if f.exists())
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT name, SUM(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC"
        ).fetchall()
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        free_pages = conn.execute("PRAGMA freelist_count").fetchone()[0]
        content = conn.execute(
            "SELECT SUM(LENGTH(CAST(content AS BLOB))) + SUM(LENGTH(CAST(tool_calls AS BLOB))) "
            "FROM messages"
        ).fetchone()[0]
    finally:
        conn.close()
    breakdown = {name: round(size / messages, 1) for name, size in rows[:10]}
    return {
        "db_bytes": db_bytes,
        "bytes_per_message": round(db_bytes / messages, 1),
        "content_bytes_per_message": round(content / messages, 1),
        "page_size": page_size,
        "free_pages": free_pages,
        "bytes_per_message_by_object": breakdown,
    }


# --- the run --------------------------------------------------------------------------------


@contextmanager
def workspace(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    tmp = Path(tempfile.mkdtemp(prefix="hermes-bench-store-"))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small store (< 60 s in all)")
    parser.add_argument("--sessions", type=int, help="sessions to build")
    parser.add_argument("--messages", type=int, help="messages to build")
    parser.add_argument("--appends", type=int, default=2000, help="timed appends")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1, help="corpus generator processes")
    parser.add_argument("--keep", type=Path, help="build in (and keep) this directory")
    parser.add_argument("--reuse", action="store_true", help="reuse the store under --keep")
    parser.add_argument("--no-bare", action="store_true", help="skip the bare-table comparison")
    parser.add_argument("--no-export", action="store_true", help="skip the export")
    parser.add_argument(
        "--no-fleet", action="store_true", help="skip the appends beside a checkpointer process"
    )
    parser.add_argument(
        "--pending-sweep-seconds",
        type=float,
        help="PostgreSQL: how often the index pending sweep runs beside the appends (beat's "
        "default; 0: never, to see what a writer pays without it)",
    )
    parser.add_argument(
        "--database-url",
        help="time on this PostgreSQL database (postgresql://…): the built corpus is copied "
        "into a fresh schema of it (dropped at the end); SQLite-only figures are left out",
    )
    args = parser.parse_args(argv)
    default_sessions, default_messages = QUICK if args.quick else FULL
    args.sessions = args.sessions or default_sessions
    args.messages = args.messages or default_messages
    if args.reuse and args.keep is None:
        parser.error("--reuse needs --keep")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    with workspace(args.keep) as workdir:
        path = workdir / "state.db"
        result: dict[str, Any] = {}
        if args.reuse and path.exists():
            say(f"reusing {path}")
            result["build_seconds"] = 0.0
        else:
            for stale in workdir.glob("*.db*"):
                stale.unlink()
            result["build_seconds"] = round(
                build(path, args.sessions, args.messages, args.seed, args.workers), 1
            )
        checkpoint(path)
        built_size = measure_size(path)
        result["built_bytes_per_message"] = built_size["bytes_per_message"]
        say(f"size after build: {built_size['bytes_per_message']} B/msg")
        if args.database_url:
            result.update(on_postgres(args, path, workdir))
            return finish(result, args, started, load_before)
        bare: Store | None = None
        if not args.no_bare:
            bare_path = workdir / "bare.db"
            for stale in workdir.glob("bare.db*"):
                stale.unlink()
            make_bare(path, bare_path)
            bare = connect(f"sqlite:///{bare_path}")
        store = open_store(f"sqlite:///{path}")
        try:
            with store.read() as conn:
                session_ids = [r[0] for r in conn.exec_driver_sql("SELECT id FROM sessions")]
                messages, sessions = conn.exec_driver_sql(
                    "SELECT SUM(messages), SUM(sessions) FROM source_stats"
                ).one()
            result.update(messages=int(messages), sessions=int(sessions))
            say(f"store: {sessions:,} sessions, {messages:,} messages")
            result.update(measure_appends(store, bare, session_ids, args.appends, args.seed))
            say(
                f"append: p50 {result['append_p50_ms']} ms, p99 {result['append_p99_ms']} ms, "
                f"max {result['append_max_ms']} ms (cpu p99 {result['append_cpu_p99_ms']} ms); "
                f"bare p50 {result.get('bare_append_p50_ms')} ms"
            )
            if not args.no_fleet:
                result.update(
                    measure_fleet_appends(store, path, session_ids, args.appends, args.seed + 1)
                )
                say(
                    f"append with a checkpointer process: p50 {result['fleet_append_p50_ms']} ms,"
                    f" p99 {result['fleet_append_p99_ms']} ms, max {result['fleet_append_max_ms']}"
                    f" ms ({result['fleet_checkpoints']} checkpoints, longest "
                    f"{result['fleet_checkpoint_max_ms']} ms)"
                )
            result.update(measure_reads(store, repeats=200))
            say(
                f"list {result['list_ms']} ms (p99 {result['list_p99_ms']}, plain "
                f"{result['plain_list_ms']}); stats {result['stats_ms']} ms (plain "
                f"{result['plain_stats_ms']})"
            )
            if not args.no_export:
                result.update(measure_export(store, workdir))
                say(f"export: {result['export_messages_per_s']:,} messages/s")
        finally:
            store.close()
            if bare is not None:
                bare.close()
        result.update(measure_search(path))
        result.update(measure_size(path))
        say(
            f"size: {result['bytes_per_message']} B/msg ({result['db_bytes']:,} bytes; content "
            f"{result['content_bytes_per_message']} B/msg); {result['bytes_per_message_by_object']}"
        )
    return finish(result, args, started, load_before)


def on_postgres(args: argparse.Namespace, path: Path, workdir: Path) -> dict[str, Any]:
    result: dict[str, Any] = {"database": "postgresql"}
    store, seconds = copy_corpus(path, args.database_url, progress)
    try:
        result["copy_seconds"] = round(seconds, 1)
        with store.read() as conn:
            session_ids = [r[0] for r in conn.exec_driver_sql("SELECT id FROM sessions")]
            # PostgreSQL keeps no source_stats rows (shared.store.session_listing.stats sums these)
            messages, sessions = conn.exec_driver_sql(
                "SELECT SUM(message_count), COUNT(*) FROM sessions"
            ).one()
        result.update(messages=int(messages), sessions=int(sessions))
        say(f"postgresql: {sessions:,} sessions, {messages:,} messages (copied in {seconds:.0f} s)")
        with pending_sweep(store, args.pending_sweep_seconds) as swept:
            result.update(measure_appends(store, None, session_ids, args.appends, args.seed))
        result["pending_sweeps"] = swept
        say(
            f"append: p50 {result['append_p50_ms']} ms, p99 {result['append_p99_ms']} ms, "
            f"max {result['append_max_ms']} ms (cpu p99 {result['append_cpu_p99_ms']} ms); "
            f"pending sweeps beside them moved {swept} pages"
        )
        result.update(measure_reads(store, repeats=200))
        say(
            f"list {result['list_ms']} ms (p99 {result['list_p99_ms']}, plain "
            f"{result['plain_list_ms']}); stats {result['stats_ms']} ms (plain "
            f"{result['plain_stats_ms']})"
        )
        if not args.no_export:
            result.update(measure_export(store, workdir))
            say(f"export: {result['export_messages_per_s']:,} messages/s")
    finally:
        store.close()
        drop_bench_schemas(args.database_url)
    return result


def finish(
    result: dict[str, Any], args: argparse.Namespace, started: float, load_before: float
) -> int:
    result["total_seconds"] = round(time.perf_counter() - started, 1)
    result["targets"] = TARGETS
    result["targets_met"] = {
        key: result[key] <= limit for key, limit in TARGETS.items() if key in result
    }
    result["quick"] = args.quick
    result["load_average"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    print(json.dumps(result, ensure_ascii=False), flush=True)
    return 0


def count_messages(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT SUM(messages) FROM source_stats").fetchone()[0])
    finally:
        conn.close()


if __name__ == "__main__":
    raise SystemExit(main())
