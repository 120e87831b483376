"""Search benchmark: p50/p99 of every session_search call shape on a big store; last line JSON.

    python -m bench.search                 # 1.5M messages in 21,000 sessions (minutes to build)
    python -m bench.search --quick         # a small store, well within 60 s
    python -m bench.search --db PATH       # keep the store at PATH; reuse it when it is there
    python -m bench.search --db PATH --database-url postgresql://...   # the same on PostgreSQL

The store is `bench.corpus` (the shared seeded corpus: Zipf vocabulary, code, tool JSON, 5-8%
of messages in Chinese or Japanese), built through the real schema, so the trigram index is
filled by its triggers like in production. Queries are drawn from the store itself (seeded):
rare words (1-100 messages), the commonest words (each in most sessions), pairs, phrases
taken from messages, 4-letter prefixes, 2- and 4-character CJK substrings of messages, scrolls
around random messages, browses. Every call goes through the agent tool's entry
(`shared.search.tool.run`), so the figures include everything the model gets back: lineage
dedup, snippets, windows and bookends. Beside them, on the same file, the plain alternative
(`--plain` queries per class): bm25 over every match for words, a `LIKE` scan for CJK.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import search_recall
from bench.common import quantile
from bench.corpus import build_store, vocabulary
from shared.db import Store, open_store
from shared.search.tool import run
from shared.store import session_listing
from shared.unsegmented import char_class

FULL = {"sessions": 21_000, "messages": 1_500_000}
QUICK = {"sessions": 1_000, "messages": 60_000}
TARGET_MS = {"discover_p99": 50.0, "scroll_p99": 2.0, "browse_p99": 10.0}
SIDECAR = ".bench.json"
WORD = re.compile(r"[a-z]{3,}")
CONVERSATION = (
    "SELECT content FROM messages WHERE id >= ? AND role IN ('user', 'assistant')"
    " AND content IS NOT NULL LIMIT 1"
)
TOKEN = re.compile(r"\b(?=\w*[a-z])\w{5,}\b")
RUN = re.compile(char_class() + "{4,}")


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
    stats = build_store(path, seed=seed, workers=max(1, (os.cpu_count() or 2) - 1), **size)
    meta = {"corpus": wanted, "build_seconds": round(stats.seconds, 1)}
    sidecar.write_text(json.dumps(meta))
    return {**meta, "reused": False}


def _random_rows(db: sqlite3.Connection, rnd: random.Random, sql: str, n: int) -> list[tuple]:
    """`n` rows of `sql` (which takes a lower id bound) at random places of the id range."""
    top = db.execute("SELECT max(id) FROM messages").fetchone()[0]
    found: list[tuple] = []
    for _ in range(n * 20):
        row = db.execute(sql, (rnd.randrange(1, top),)).fetchone()
        if row is not None:
            found.append(row)
        if len(found) == n:
            break
    return found


def _rare(db: sqlite3.Connection, rnd: random.Random, n: int) -> list[str]:
    """Words in 1-100 messages: the vocabulary's tail at small sizes, one-off tokens (ids,
    versions, names) taken from random messages at full size."""
    db.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.bench_vocab"
        " USING fts5vocab(main, messages_fts, 'row')"
    )
    candidates = list(vocabulary().words[15_000:])
    rnd.shuffle(candidates)
    texts = _random_rows(db, rnd, CONVERSATION, n * 10)
    tokens = {t for (text,) in texts for t in TOKEN.findall(str(text).lower())}
    candidates = sorted(tokens) + candidates[: n * 20]
    rnd.shuffle(candidates)
    picked = []
    for word in candidates:
        row = db.execute("SELECT doc FROM temp.bench_vocab WHERE term = ?", (word,)).fetchone()
        if row is not None and 1 <= row[0] <= 100:
            picked.append(word)
        if len(picked) == n:
            break
    return picked


def _queries(db: sqlite3.Connection, n: int, seed: int) -> dict[str, list[dict[str, Any]]]:
    rnd = random.Random(seed)
    words = [w for w in vocabulary().words if w.isalpha()]
    mid = words[100:3000]
    english = _random_rows(db, rnd, CONVERSATION, n * 3)
    phrases = []
    for (text,) in english:
        found = re.findall(r"\w+", str(text).lower())
        pairs = [(a, b) for a, b in pairwise(found) if WORD.fullmatch(a) and WORD.fullmatch(b)]
        if pairs:
            phrases.append('"{} {}"'.format(*rnd.choice(pairs)))
    cjk_rows = _random_rows(
        db,
        rnd,
        "SELECT m.content FROM messages_cjk_docsize AS d JOIN messages AS m"
        " ON m.id = d.id WHERE d.id >= ? AND m.role IN ('user', 'assistant') LIMIT 1",
        n * 2,
    )
    runs = [r for (text,) in cjk_rows for r in RUN.findall(text)]

    def piece(size: int) -> str:
        text = rnd.choice(runs)
        at = rnd.randrange(len(text) - size + 1)
        return text[at : at + size]

    scroll = [
        {"session_id": sid, "around_message_id": mid_, "window": 5}
        for mid_, sid in _random_rows(
            db, rnd, "SELECT id, session_id FROM messages WHERE id >= ? LIMIT 1", n
        )
    ]
    firsts, seconds = rnd.sample(mid, n), rnd.sample(mid, n)
    sessions = db.execute("SELECT count(*) FROM sessions").fetchone()[0]
    depth = min(PAGE_DEPTH, sessions // 2)
    return {
        "rare_term": [{"query": w} for w in _rare(db, rnd, n)],
        "common_term": [{"query": w} for w in words[:n]],
        "two_term_and": [{"query": f"{a} {b}"} for a, b in zip(firsts, seconds, strict=True)],
        "phrase": [{"query": p} for p in phrases[:n]],
        "prefix": [{"query": w[:4] + "*"} for w in rnd.sample([w for w in mid if len(w) >= 6], n)],
        "cjk_2char": [{"query": piece(2)} for _ in range(n)],
        "cjk_4char": [{"query": piece(4)} for _ in range(n)],
        "scroll": scroll,
        "browse": [{} for _ in range(n)],
        "deep_page": [{"offset": depth + rnd.randrange(20)} for _ in range(n)],
    }


def _time(call: Callable[[], dict[str, Any]]) -> tuple[float, float, dict[str, Any]]:
    """(wall ms, this thread's CPU ms, result): on a shared, noisy machine the CPU time is the
    cost of the call itself and the wall time adds whatever else the machine was doing."""
    began, cpu = time.perf_counter(), time.thread_time()
    result = call()
    return (time.perf_counter() - began) * 1000, (time.thread_time() - cpu) * 1000, result


def _measure(store: Store, queries: dict[str, list]) -> dict[str, dict[str, Any]]:
    for name, calls in queries.items():  # warm the connection pool
        for args in calls[:3]:
            _ours_call(store, name, args)()
    report: dict[str, dict[str, Any]] = {}
    for name, calls in queries.items():
        if not calls:
            print(f"{name:>13}: no queries of this kind in this store")
            continue
        times: list[float] = []
        cpu: list[float] = []
        found = errors = 0
        for args in calls:
            ms, cpu_ms, result = _time(_ours_call(store, name, args))
            times.append(ms)
            cpu.append(cpu_ms)
            errors += "error" in result
            found += bool(result.get("results") or result.get("messages") or result.get("sessions"))
        report[name] = {
            "n": len(times),
            "p50_ms": round(statistics.median(times), 2),
            "p99_ms": round(quantile(times, 0.99), 2),
            "max_ms": round(max(times), 2),
            "cpu_p50_ms": round(statistics.median(cpu), 2),
            "cpu_p99_ms": round(quantile(cpu, 0.99), 2),
            "with_results": found,
            "errors": errors,
        }
        print(f"{name:>13}: {json.dumps(report[name])}")
    return report


PLAIN_FTS = (
    "SELECT m.id, m.session_id, snippet(messages_fts, 0, '>>>', '<<<', '...', 40)"
    " FROM messages_fts JOIN messages AS m ON m.id = messages_fts.rowid"
    " WHERE messages_fts MATCH ? ORDER BY rank LIMIT 50"
)
PLAIN_LIKE = (
    "SELECT id, session_id, substr(content, 1, 200) FROM messages"
    " WHERE content LIKE ? ORDER BY timestamp DESC LIMIT 50"
)
PLAIN_PAGE = "SELECT * FROM sessions ORDER BY last_active_at DESC LIMIT 20 OFFSET ?"
PAGE_DEPTH = 10_000  # `sessions list` at this offset (half the sessions in a small store)


def _plain_call(db: sqlite3.Connection, name: str, args: dict[str, Any]) -> Callable[[], Any]:
    """The plain alternative of one call: FTS5 ranked by bm25 over every match
    (`ORDER BY rank LIMIT 50`, no bound) for words, `LIKE '%...%'` (a scan) for CJK, which is
    what a store without a trigram index has to do, OFFSET over the sessions for a deep page."""
    if name == "deep_page":
        return lambda: db.execute(PLAIN_PAGE, (args["offset"],)).fetchall()
    if name.startswith("cjk"):
        return lambda: db.execute(PLAIN_LIKE, (f"%{args['query']}%",)).fetchall()
    return lambda: db.execute(PLAIN_FTS, (args["query"],)).fetchall()


def _ours_call(store: Store, name: str, args: dict[str, Any]) -> Callable[[], Any]:
    if name == "deep_page":

        def page() -> dict[str, Any]:
            with store.read() as conn:
                rows, _more = session_listing.list_sessions(conn, limit=20, offset=args["offset"])
            return {"sessions": rows}

        return page
    return lambda: run(store, args, None)


def _plain(
    store: Store, db: sqlite3.Connection, queries: dict[str, list], n: int
) -> dict[str, dict[str, Any]]:
    """Ours beside the plain alternative, `n` calls per class, alternating call by call on
    the same queries (so both see the same machine load)."""
    report: dict[str, dict[str, Any]] = {}
    for name, calls in queries.items():
        if name in {"scroll", "browse"} or not calls or n <= 0:
            continue
        ours: list[float] = []
        plain: list[float] = []
        for args in calls[:n]:
            plain.append(_time(_plain_call(db, name, args))[0])
            ours.append(_time(_ours_call(store, name, args))[0])
        report[name] = {
            "n": len(plain),
            "plain_p50_ms": round(statistics.median(plain), 2),
            "plain_p99_ms": round(quantile(plain, 0.99), 2),
            "ours_p50_ms": round(statistics.median(ours), 2),
            "ours_p99_ms": round(quantile(ours, 0.99), 2),
        }
        print(f"{'plain ' + name:>19}: {json.dumps(report[name])}")
    return report


def _sizes(db: sqlite3.Connection) -> dict[str, Any]:
    raw_bytes = db.execute(
        "SELECT coalesce(sum(length(CAST(content AS BLOB))), 0) FROM messages"
    ).fetchone()[0]
    page = db.execute("PRAGMA page_size").fetchone()[0]
    total = db.execute("PRAGMA page_count").fetchone()[0] * page
    groups = {"messages_fts": 0, "messages_cjk": 0}
    role_index = 0
    try:
        for name, size in db.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"):
            role_index += size if name == "ix_messages_session_role" else 0
            for prefix in groups:
                if name.startswith(prefix + "_"):
                    groups[prefix] += size
    except sqlite3.OperationalError:  # no dbstat in this SQLite build
        pass
    mb = 1024 * 1024
    index = sum(groups.values())
    return {
        "db_mb": round(total / mb, 1),
        "raw_text_mb": round(raw_bytes / mb, 1),  # message content, UTF-8
        "word_index_mb": round(groups["messages_fts"] / mb, 1),
        "substring_index_mb": round(groups["messages_cjk"] / mb, 1),
        "index_overhead": round(index / raw_bytes, 3) if raw_bytes else None,
        "role_index_mb": round(role_index / mb, 1),  # (session_id, id, role), for windows
        "cjk_messages": db.execute("SELECT count(*) FROM messages_cjk_docsize").fetchone()[0],
    }


def _verdict(report: dict[str, dict[str, Any]], key: str) -> dict[str, bool]:
    discover = [v[key] for k, v in report.items() if k not in {"scroll", "browse", "deep_page"}]
    return {
        "discover_p99_le_50ms": max(discover) <= TARGET_MS["discover_p99"],
        "scroll_p99_le_2ms": report["scroll"][key] <= TARGET_MS["scroll_p99"],
        "browse_p99_le_10ms": report["browse"][key] <= TARGET_MS["browse_p99"],
    }


def _session_share(db: sqlite3.Connection, words: list[str], sessions: int) -> float:
    """The smallest share of sessions that one of `words` occurs in."""
    shares = []
    for word in words:
        found = db.execute(
            "SELECT count(DISTINCT m.session_id) FROM messages_fts AS f"
            " JOIN messages AS m ON m.id = f.rowid WHERE messages_fts MATCH ?",
            (f'"{word}"',),
        ).fetchone()[0]
        shares.append(found / max(1, sessions))
    return round(min(shares), 3)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small store, under a minute")
    parser.add_argument("--db", type=Path, help="where to build (and later reuse) the store")
    parser.add_argument("--queries", type=int, default=100, help="queries per class (>= 50)")
    parser.add_argument("--seed", type=int, default=1, help="corpus seed")
    parser.add_argument(
        "--plain",
        type=int,
        default=50,
        help="calls per class timed beside the plain alternative (0: none)",
    )
    parser.add_argument(
        "--after-prune",
        action="store_true",
        help="measure a copy of the store after the product's prune took 25%% of its messages",
    )
    parser.add_argument("--facts", type=int, default=200, help="planted facts for recall@3")
    parser.add_argument(
        "--database-url",
        help="measure on this PostgreSQL database instead: the corpus (built or reused at --db)"
        " is copied into it unless it already holds it",
    )
    args = parser.parse_args(argv)
    size = QUICK if args.quick else FULL
    if args.database_url:
        _main_postgresql(args, size)
        return
    pruning: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory() as scratch:
        path = args.db or Path(scratch) / "state.db"
        meta = _store(path, size, args.seed, reuse=args.db is not None)
        if args.after_prune:
            print("pruning 25% of the messages of a copy through the product's sweep ...")
            path, pruning = search_recall.pruned_copy(path)
            print(f"       pruned: {json.dumps(pruning)}")
        db = sqlite3.connect(path)
        queries = _queries(db, max(50, args.queries), args.seed + 10)
        facts = search_recall.plant(db, args.facts, args.seed + 20)
        store = open_store(f"sqlite:///{path}")
        try:
            report = _measure(store, queries)
            plain = _plain(store, db, queries, args.plain)
            recall = search_recall.recall(store, db, facts)
            print(f"       recall: {json.dumps(recall)}")
        finally:
            store.close()
            search_recall.restore(db, facts)
        sizes = _sizes(db)
        messages = db.execute("SELECT count(*) FROM messages").fetchone()[0]
        sessions = db.execute("SELECT count(*) FROM sessions").fetchone()[0]
        common = [q["query"] for q in queries["common_term"]]
        share = _session_share(db, [common[0], common[len(common) // 2], common[-1]], sessions)
        db.close()
    summary = {
        "bench": "search",
        "quick": args.quick,
        "messages": messages,
        "sessions": sessions,
        "build_s": meta["build_seconds"],
        "reused_store": meta["reused"],
        "sqlite": sqlite3.sqlite_version,
        **sizes,
        "common_term_min_session_share": share,
        "classes": report,
        "after_prune": pruning,
        "beside_plain": plain,
        "plain_over_ours": {
            name: {
                "p50": round(v["plain_p50_ms"] / max(v["ours_p50_ms"], 1e-3), 2),
                "p99": round(v["plain_p99_ms"] / max(v["ours_p99_ms"], 1e-3), 2),
            }
            for name, value in plain.items()
            for v in (value,)
        },
        "recall": recall,
        "targets_met_wall": _verdict(report, "p99_ms"),
        "targets_met_cpu": _verdict(report, "cpu_p99_ms"),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(summary, ensure_ascii=False, separators=(",", ":")))
    sys.stdout.flush()


def _main_postgresql(args: argparse.Namespace, size: dict[str, int]) -> None:
    """The same classes on PostgreSQL, beside an `ILIKE` scan; no recall or prune run."""
    import psycopg

    from bench import search_postgres as pg

    with tempfile.TemporaryDirectory() as scratch:
        path = args.db or Path(scratch) / "state.db"
        meta = _store(path, size, args.seed, reuse=args.db is not None)
        source = sqlite3.connect(path)
        copied = None
        if not pg.loaded(args.database_url, source):
            print(f"copying the corpus into {args.database_url} ...")
            copied = round(pg.copy_corpus(args.database_url, source, print), 1)
            print(f"       copied in {copied} s")
        queries = _queries(source, max(50, args.queries), args.seed + 10)
        source.close()
    store = open_store(args.database_url)
    plain_db = psycopg.connect(args.database_url.replace("postgresql+psycopg", "postgresql"))
    try:
        report = _measure(store, queries)
        plain: dict[str, dict[str, Any]] = {}
        for name, calls in queries.items():
            if name in {"scroll", "browse"} or not calls or args.plain <= 0:
                continue
            ours, scan = [], []
            for call in calls[: args.plain]:
                scan.append(_time(pg.plain_call(plain_db, name, call))[0])
                ours.append(_time(_ours_call(store, name, call))[0])
            plain[name] = {
                "n": len(scan),
                "plain_ilike_p50_ms": round(statistics.median(scan), 2),
                "plain_ilike_p99_ms": round(quantile(scan, 0.99), 2),
                "ours_p50_ms": round(statistics.median(ours), 2),
                "ours_p99_ms": round(quantile(ours, 0.99), 2),
            }
            print(f"{'plain ' + name:>19}: {json.dumps(plain[name])}")
        messages = plain_db.execute("SELECT count(*) FROM messages").fetchone()
        sessions = plain_db.execute("SELECT count(*) FROM sessions").fetchone()
    finally:
        plain_db.close()
        store.close()
    summary = {
        "bench": "search",
        "dialect": "postgresql",
        "quick": args.quick,
        "messages": messages[0] if messages else 0,
        "sessions": sessions[0] if sessions else 0,
        "build_s": meta["build_seconds"],
        "copy_s": copied,
        **pg.sizes(args.database_url),
        "classes": report,
        "beside_plain": plain,
        "targets_met_wall": _verdict(report, "p99_ms"),
        "targets_met_cpu": _verdict(report, "cpu_p99_ms"),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(summary, ensure_ascii=False, separators=(",", ":")))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
