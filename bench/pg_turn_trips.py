"""What one turn costs PostgreSQL: round trips, statements the server parses, pings.

    python bench/pg_turn_trips.py --database-url postgresql://… [--quick]

Runs turns one after another in this process with the product's functions, in a fresh schema
of the given database (dropped at the end) and a private Redis: the receiver's
`producers.intake.accept`, then the worker's `workers.drain.drain` of the session and
`workers.flush.flush` of the chat's lane (the terminal platform, a zero-latency offline model).
Every PostgreSQL connection the two stores open is traced by libpq (PQtrace), and the protocol
messages of the measured turns counted:

- round trips: the server's ReadyForQuery messages (each ends one exchange the client waited
  for: a simple query, or an extended-protocol Sync);
- parses: statements the server parsed and planned (Parse messages, and simple queries other
  than BEGIN/COMMIT/ROLLBACK and pings); a statement psycopg has prepared is only bound and run;
- transaction control: BEGIN / COMMIT / ROLLBACK;
- pings: SQLAlchemy's pool_pre_ping (`;` on psycopg, a round trip of its own).

Warm-up turns first (new connections, psycopg's prepare threshold). The last line printed is one
JSON object; per-turn figures are totals over the measured turns / turns, for the receiver's
store and the worker's apart and together. `--statements` adds each distinct statement with the
times it ran per turn (a prepared statement's runs are its Binds), to see what the trips are.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import event

from bench.common import Children, fresh_schema, log, run_in_work_dir, start_redis
from bench.pipeline_turns import make_turn
from shared.db import Store
from shared.ports import RecordingWaker
from shared.settings import load_settings

FULL = (20, 300)  # warm-up turns, measured turns
QUICK = (10, 60)
_CONTROL = re.compile(r"^\s*(BEGIN|COMMIT|ROLLBACK|START TRANSACTION)\b", re.IGNORECASE)
_PING = re.compile(r"^\s*(SELECT 1\s*;?|;)\s*$", re.IGNORECASE)  # pool_pre_ping


@dataclass
class Tracer:
    """libpq traces of one store's connections, each into a file of its own."""

    work: Path
    name: str
    raw: list[Any] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    statements: Counter[str] = field(default_factory=Counter)  # SQL -> times run (by count())
    # A connection's statements prepared before a restart, for the file it traces into after it.
    prepared: dict[Path, dict[str, str]] = field(default_factory=dict)

    def attach(self, store: Store) -> None:
        event.listen(store.engine, "connect", lambda dbapi, _record: self._trace(dbapi))

    def _trace(self, dbapi: Any) -> None:
        from psycopg import pq

        path = Path(tempfile.mkstemp(dir=self.work, prefix=f"{self.name}-", suffix=".trace")[1])
        handle = path.open("w")  # libpq writes through a FILE of its own on this descriptor
        dbapi.pgconn.trace(handle.fileno())
        dbapi.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        self.raw.append((dbapi, handle))
        self.files.append(path)

    def restart(self) -> None:
        """Forget everything traced so far: each live connection traces into a new file."""
        live = [
            (dbapi, path)
            for (dbapi, _handle), path in zip(self.raw, self.files, strict=True)
            if not dbapi.closed
        ]
        self.stop()
        self.raw, self.files = [], []
        for dbapi, old in live:
            names = {**self.prepared.get(old, {}), **_parsed(old)}
            self._trace(dbapi)
            self.prepared[self.files[-1]] = names

    def stop(self) -> None:
        for dbapi, handle in self.raw:
            if not dbapi.closed:
                dbapi.pgconn.untrace()  # flushes libpq's buffer into the file
            handle.close()

    def count(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for path in self.files:
            named = dict(self.prepared.get(path, {}))  # prepared statement -> SQL (its Parse)
            for parts in _messages(path):
                if len(parts) < 3:
                    continue
                side, kind = parts[0], parts[2]
                body = parts[3].strip() if len(parts) > 3 else ""
                if side == "B" and kind == "ReadyForQuery":
                    counts["round_trips"] += 1
                elif side == "F" and kind == "Query":
                    sql = _quoted(body, 1)[0]
                    _count_sql(counts, sql)
                    counts["statements_run"] += 1
                    self.statements[_one_line(sql)] += 1
                elif side == "F" and kind == "Parse":
                    name, sql = _quoted(body, 2)
                    named[name] = sql
                    _count_sql(counts, sql, ping=False)
                elif side == "F" and kind == "Bind":
                    counts["statements_run"] += 1
                    sql = named.get(_quoted(body, 2)[1], "")
                    self.statements[_one_line(sql)] += 1
                    if _PING.match(sql):
                        counts["pings"] += 1
        return counts


def _count_sql(counts: Counter[str], sql: str, *, ping: bool = True) -> None:
    """One statement the server parsed: a ping, BEGIN/COMMIT/ROLLBACK, or any other."""
    if _PING.match(sql):
        counts["pings" if ping else "parses"] += 1
    elif _CONTROL.match(sql):
        counts["transaction_control"] += 1
    else:
        counts["parses"] += 1


def _messages(path: Path) -> list[list[str]]:
    """A trace file's protocol messages, each split into side, length, kind and body. A message
    is one line unless its SQL holds line breaks: lines that start with no side continue it."""
    found: list[list[str]] = []
    for line in path.read_text(errors="replace").splitlines():
        if line[:2] in ("F\t", "B\t") or not found:
            found.append(line.split("\t", 3))
        elif len(found[-1]) > 3:
            found[-1][3] += "\n" + line
    return found


def _parsed(path: Path) -> dict[str, str]:
    """The statements a trace file shows prepared: name -> SQL."""
    named: dict[str, str] = {}
    for parts in _messages(path):
        if len(parts) > 3 and parts[0] == "F" and parts[2] == "Parse":
            name, sql = _quoted(parts[3].strip(), 2)
            named[name] = sql
    return named


def _one_line(sql: str) -> str:
    return " ".join(sql.split())


def _quoted(body: str, n: int) -> list[str]:
    """The first `n` quoted fields of a traced message (`"name" "SQL" …`), unquoted."""
    fields = [m.replace('""', '"') for m in re.findall(r'"((?:[^"]|"")*)"', body)[:n]]
    return fields + [""] * (n - len(fields))


def run(
    work: Path, children: Children, database_url: str, warm: int, turns: int, width: int = 0
) -> dict:
    from producers.intake import accept
    from workers.drain import drain
    from workers.flush import flush
    from workers.runtime import build_runtime

    store_url = fresh_schema(database_url, work.name)
    assert store_url is not None
    env = {
        "HERMES_HOME": str(work),
        "HERMES_DATABASE_URL": store_url,
        "HERMES_BROKER_URL": start_redis(children, work),
        "HERMES_MODEL__OFFLINE_LATENCY_MS": "0",
    }
    settings = load_settings(env)
    waker = RecordingWaker()
    rt = build_runtime(settings, waker)
    from shared.db import open_store

    receiver = open_store(store_url)
    tracers = {"receiver": Tracer(work, "receiver"), "worker": Tracer(work, "worker")}
    tracers["receiver"].attach(receiver)
    tracers["worker"].attach(rt.store)
    receiver.engine.dispose()  # connections opened so far were not traced
    rt.store.engine.dispose()

    def one(n: int) -> None:
        waker.drains.clear()
        waker.deliveries.clear()
        accept(receiver, waker, make_turn(f"c{n % 20}", n), settings=settings, clock=time.time)
        for key, _countdown in list(waker.drains):
            drain(rt, key)
        for lane, _countdown in list(waker.deliveries):
            flush(rt, lane)

    try:
        for n in range(warm):
            one(n)
        for tracer in tracers.values():
            tracer.restart()
        started = time.perf_counter()
        for n in range(warm, warm + turns):
            one(n)
        elapsed = time.perf_counter() - started
        for tracer in tracers.values():
            tracer.stop()
    finally:
        rt.close()
        receiver.close()
    counts = {name: tracer.count() for name, tracer in tracers.items()}
    keys = ("round_trips", "parses", "transaction_control", "pings", "statements_run")
    per_turn = {
        name: {key: round(found[key] / turns, 2) for key in keys} for name, found in counts.items()
    }
    per_turn["total"] = {
        key: round(sum(found[key] for found in counts.values()) / turns, 2) for key in keys
    }
    result: dict[str, Any] = {
        "turns": turns,
        "warm_turns": warm,
        "ms_per_turn": round(elapsed / turns * 1000, 2),
        "per_turn": per_turn,
    }
    if width:
        result["statements"] = {
            name: [
                [round(n / turns, 2), sql[:width]]
                for sql, n in sorted(tracer.statements.items(), key=lambda kv: (-kv[1], kv[0]))
            ]
            for name, tracer in tracers.items()
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description="PostgreSQL round trips, server parses and pings per turn (receiver and "
        "worker), counted from libpq's protocol trace. The last stdout line is JSON."
    )
    parser.add_argument("--database-url", required=True, help="a PostgreSQL database to use")
    parser.add_argument("--quick", action="store_true", help="fewer turns, a few seconds")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (traces)")
    parser.add_argument(
        "--statements",
        nargs="?",
        type=int,
        const=160,
        default=0,
        metavar="WIDTH",
        help="also list each distinct statement (its first WIDTH characters, default 160) with "
        "the times it ran per turn, for the receiver and the worker",
    )
    args = parser.parse_args()
    warm, turns = QUICK if args.quick else FULL
    result = run_in_work_dir(
        "hermes-pg-trips-",
        args.database_url,
        lambda work, children: run(work, children, args.database_url, warm, turns, args.statements),
        keep=args.keep,
    )
    if result is None:
        sys.exit(130)
    for name, figures in result["per_turn"].items():
        log(f"{name:9} per turn: " + ", ".join(f"{k} {v}" for k, v in figures.items()))
    for name, listed in result.get("statements", {}).items():
        log(f"{name} statements per turn:")
        for per_turn, sql in listed:
            log(f"  {per_turn:6.2f}  {sql}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
