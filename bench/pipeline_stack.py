"""The pipeline bench's stack: a HERMES_HOME with its store, a producer and `hermes worker`
processes, CPU accounting, and bare no-op tasks (the baseline every phase compares against)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from bench.common import Children, fresh_schema, percentiles
from bench.pipeline_turns import in_threads, make_turn, max_turn_id, wait_for
from producers.broker import PUBLISH_RETRY, BrokerWaker, broker_client
from producers.intake import accept
from shared.db import Store, open_store
from shared.settings import Settings, load_settings
from shared.tasknames import PROBE, TURNS_QUEUE


@dataclass(frozen=True)
class Pool:
    processes: int
    concurrency: int
    kind: str


def _cpu_seconds(groups: set[int], names: tuple[str, ...]) -> tuple[float, dict[str, float]]:
    """CPU seconds (user + system) used so far by every process in these process groups, and by
    every process whose command name is one of `names` (the servers: PostgreSQL's backends,
    redis-server), per name."""
    tick = os.sysconf("SC_CLK_TCK")
    grouped, by_name = 0, dict.fromkeys(names, 0)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            name, rest = (entry / "stat").read_text().rsplit(")", 1)
        except OSError:  # gone meanwhile
            continue
        fields, comm = rest.split(), name.split("(", 1)[1]
        used = int(fields[11]) + int(fields[12])  # utime, stime
        if int(fields[2]) in groups:  # pgrp
            grouped += used
        elif comm in by_name:
            by_name[comm] += used
    return grouped / tick, {comm: used / tick for comm, used in by_name.items()}


# The servers a turn also costs CPU in, on this machine: every PostgreSQL backend (a fleet's
# store; nothing on SQLite) and redis-server (the broker, bare tasks' too). Whatever else these
# servers do meanwhile is counted, so run the bench on an otherwise quiet machine.
SERVERS = {"postgres": "database", "redis-server": "broker"}


class CpuMeter:
    """CPU time spent over a phase by the workers, by this process (the producers) and by the
    servers (SERVERS): per turn it varies far less than throughput on a shared machine. Linux
    only (None elsewhere)."""

    def __init__(self, stack: Stack) -> None:
        self._groups = {proc.pid for proc in stack.workers}
        self._start = self._now()

    def _now(self) -> dict[str, float] | None:
        if not Path("/proc/self/stat").exists():
            return None
        own = os.times()
        workers, servers = _cpu_seconds(self._groups, tuple(SERVERS))
        used = {"workers": workers, "producer": own.user + own.system}
        used.update({SERVERS[comm]: seconds for comm, seconds in servers.items()})
        return used

    def per_item_ms(self, items: int) -> dict[str, float] | None:
        end = self._now()
        if self._start is None or end is None or items <= 0:
            return None
        return {part: round(1000 * (end[part] - self._start[part]) / items, 3) for part in end}


class Stack:
    """A HERMES_HOME with its store, a producer (BrokerWaker) and running workers."""

    def __init__(
        self, children: Children, home: Path, env: dict[str, str], pool: Pool, producers: int = 1
    ) -> None:
        self.children = children
        self.producers = producers
        self.home = home
        self.env = env
        self.pool = pool
        self.settings: Settings = load_settings(env)
        self.store: Store = open_store(self.settings.resolved_database_url)
        self.app = broker_client(self.settings)
        self.waker = BrokerWaker(self.app)
        self.redis = _redis_for(self.settings.resolved_broker_url)
        self.workers: list[subprocess.Popen[bytes]] = []

    def start_workers(self) -> None:
        tag = self.home.name
        for index in range(1, self.pool.processes + 1):
            argv = [
                sys.executable,
                "-m",
                "producers.cli.main",
                "worker",
                "-c",
                str(self.pool.concurrency),
                "-P",
                self.pool.kind,
                "-l",
                "WARNING",
                "-n",
                f"bench{index}-{tag}@%h",
            ]
            self.workers.append(self.children.spawn(f"worker{index}-{tag}", argv, self.env))
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in self.workers:
                if proc.poll() is not None:
                    raise RuntimeError(f"a worker exited at start (code {proc.returncode})")
            replies = self.app.control.ping(timeout=0.5)
            if len(replies) >= len(self.workers):
                break
        else:
            raise RuntimeError("workers did not answer a control ping within 60 s")
        # Each worker builds its runtime (store, broker client) on first use: do that now.
        probe(self, 20 * len(self.workers), queue=TURNS_QUEUE)
        warm = [make_turn(f"warm-{i}", 0) for i in range(10 * len(self.workers))]
        after = max_turn_id(self.store)
        for turn in warm:
            accept(self.store, self.waker, turn, settings=self.settings, clock=time.time)
        wait_for(self.store, after, len(warm), delivered=True, timeout=60)

    def stop_workers(self) -> None:
        self.children.stop(self.workers)
        self.workers = []

    def close(self) -> None:
        self.stop_workers()
        self.redis.close()
        self.store.close()


def _redis_for(url: str) -> redis.Redis:
    if url.startswith("redis+socket://"):
        return redis.Redis(unix_socket_path=url.removeprefix("redis+socket://"))
    return redis.Redis.from_url(url)


def worker_env(
    home: Path, broker_url: str | None, latency_ms: float, database_url: str | None = None
) -> dict[str, str]:
    """The environment of a stack's processes; with `database_url` (PostgreSQL) the store is a
    fresh schema of that database (bench.common.fresh_schema), else state.db in `home`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env["HERMES_HOME"] = str(home)
    store_url = fresh_schema(database_url, home.name)
    if store_url is not None:
        env["HERMES_DATABASE_URL"] = store_url
    if broker_url is not None:
        env["HERMES_BROKER_URL"] = broker_url
    env["HERMES_MODEL__OFFLINE_LATENCY_MS"] = str(latency_ms)
    return env


def probe(stack: Stack, count: int, *, queue: str) -> dict[str, Any]:
    """`count` bare no-op tasks sent as fast as possible; each reports its start to a list."""
    report_to = f"bench:probe:{uuid.uuid4().hex}"
    threads = stack.producers

    def send(index: int) -> None:
        for _ in range(index, count, threads):
            stack.app.send_task(
                PROBE,
                args=[time.time(), report_to],
                queue=queue,
                retry=True,
                retry_policy=PUBLISH_RETRY,
            )

    cpu = CpuMeter(stack)
    t0 = time.time()
    in_threads(threads, send)
    sent_s = time.time() - t0
    deadline = time.monotonic() + 120
    while stack.redis.llen(report_to) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {stack.redis.llen(report_to)}/{count} probes ran in 120 s")
        time.sleep(0.01)
    cpu_ms = cpu.per_item_ms(count)
    pairs = [tuple(map(float, raw.split())) for raw in stack.redis.lrange(report_to, 0, -1)]
    stack.redis.delete(report_to)
    span = max(started for started, _ in pairs) - min(sent for _, sent in pairs)
    return {
        "tasks": count,
        "tasks_per_s": round(count / span, 1),
        "enqueue_per_s": round(count / sent_s, 1),
        "enqueue_to_start_ms": percentiles([started - sent for started, sent in pairs]),
        "cpu_ms_per_task": cpu_ms,
    }


@dataclass(frozen=True)
class Sizes:
    sessions: int
    per_session: int
    bare_tasks: int
    slow_sessions: int
    slow_per_session: int
    hops: int
