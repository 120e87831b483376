"""Message counters on PostgreSQL: what revision 0011's triggers cost an append, whether
parallel writers wait on each other, and what `sessions stats` costs without source_stats.

    python bench/pg_counters.py --database-url postgresql://… [--quick]

Builds a store in a database of its own beside the given one (dropped at the end) with
`--sessions` sessions and `--messages` messages, then measures with the product's functions:

- appends: `messages.append_message` in `store.write()`, one transaction each, into random
  sessions; p50 / p99 / max, in blocks that alternate with the count triggers present and
  dropped (the same noise falls on both);
- parallel appends: `--threads` writers, each into sessions of its own, all of one source
  (what one hot per-source counter row would serialise): appends/s against one writer;
- `session_listing.stats` and `.count_sessions` (sessions summed by source; p50 / max).

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import create_engine, make_url

from bench.common import log, percentiles
from shared.db import postgresql
from shared.db.engine import Store, open_store
from shared.store import messages as message_rows
from shared.store import session_listing
from shared.store import sessions as session_rows

FULL = (20_000, 1_000_000)
QUICK = (500, 20_000)
BLOCK = 100


def build(store: Store, sessions: int, messages: int) -> list[str]:
    ids = [f"20260101_000000_{i:08x}" for i in range(sessions)]
    per = max(1, messages // sessions)
    for start in range(0, sessions, 200):
        with store.write() as conn:
            for sid in ids[start : start + 200]:
                session_rows.create_session(conn, session_id=sid, source="telegram", now=1.0)
                rows = [
                    message_rows.NewRow("user" if j % 2 == 0 else "assistant", f"m {j}", 1.0 + j)
                    for j in range(per)
                ]
                message_rows.append_messages(conn, sid, rows)
        log(f"built {min(start + 200, sessions):,} of {sessions:,} sessions")
    return ids


def one_append(store: Store, sid: str) -> float:
    started = time.perf_counter()
    with store.write() as conn:
        message_rows.append_message(conn, sid, "user", "hello there", now=time.time())
    return time.perf_counter() - started


def set_triggers(store: Store, present: bool) -> None:
    with store.write() as conn:
        for statement in postgresql.COUNTER_DROP[:2]:
            conn.exec_driver_sql(statement)
        if present:
            for statement in postgresql.COUNTER_TRIGGERS:
                conn.exec_driver_sql(statement)


def appends(store: Store, ids: list[str], count: int, rng: random.Random) -> dict[str, Any]:
    timed: dict[bool, list[float]] = {True: [], False: []}
    for block in range(max(2, count // BLOCK)):
        present = block % 2 == 0
        set_triggers(store, present)
        timed[present] += [one_append(store, rng.choice(ids)) for _ in range(BLOCK)]
    set_triggers(store, True)
    return {"with_triggers": percentiles(timed[True]), "without": percentiles(timed[False])}


def parallel(store: Store, ids: list[str], threads: int, seconds: float) -> dict[str, float]:
    def rate(writers: int) -> float:
        done = [0] * writers
        stop = time.perf_counter() + seconds

        def work(n: int) -> None:
            mine = ids[n::writers]
            while time.perf_counter() < stop:
                one_append(store, mine[done[n] % len(mine)])
                done[n] += 1

        pool = [threading.Thread(target=work, args=(n,)) for n in range(writers)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
        return round(sum(done) / seconds, 1)

    alone = rate(1)
    together = rate(threads)
    return {
        "one_writer_per_s": alone,
        "writers_per_s": together,
        "speedup": round(together / alone, 2),
    }


def reads(store: Store, repeats: int) -> dict[str, Any]:
    def timed(action: Any) -> dict[str, float | None]:
        spent = []
        for _ in range(repeats):
            started = time.perf_counter()
            with store.read() as conn:
                action(conn)
            spent.append(time.perf_counter() - started)
        return percentiles(spent)

    return {
        "stats": timed(session_listing.stats),
        "count_sessions": timed(
            lambda conn: session_listing.count_sessions(conn, source="telegram")
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--database-url", required=True, help="postgresql://… (a database is made beside it)"
    )
    parser.add_argument("--quick", action="store_true", help="a small store (< 60 s in all)")
    parser.add_argument("--sessions", type=int)
    parser.add_argument("--messages", type=int)
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5.0, help="per parallel measurement")
    args = parser.parse_args(argv)
    if not args.database_url.startswith("postgresql"):
        parser.error("--database-url must be a postgresql:// URL")
    sessions, messages = QUICK if args.quick else FULL
    sessions, messages = args.sessions or sessions, args.messages or messages
    # A database of its own beside the given one: a schema would share the server database's
    # public alembic_version with whatever store lives there.
    url = make_url(args.database_url)
    name = f"{url.database}_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    store = open_store(url.set(database=name).render_as_string(hide_password=False))
    try:
        ids = build(store, sessions, messages)
        rng = random.Random(1)
        result: dict[str, Any] = {"sessions": sessions, "messages": messages}
        result["append_ms"] = appends(store, ids, args.appends, rng)
        print(f"append ms: {result['append_ms']}", flush=True)
        result["parallel"] = parallel(store, ids, args.threads, args.seconds)
        print(f"parallel appends: {result['parallel']}", flush=True)
        result["read_ms"] = reads(store, 50)
        print(f"reads ms: {result['read_ms']}", flush=True)
        print(json.dumps(result), flush=True)
    finally:
        store.close()
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE "{name}"')
        admin.dispose()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
