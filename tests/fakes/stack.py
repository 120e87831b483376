"""Real processes and services for receiver tests: Redis db, `hermes worker`, `hermes gateway`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import redis

ROOT = Path(__file__).resolve().parents[2]
REDIS_DB = 9  # the receiver tests' own database on the test Redis (flushed per test)


def redis_db_url(redis_url: str, db: int = REDIS_DB) -> str:
    base = redis_url.rsplit("/", 1)[0]
    url = f"{base}/{db}"
    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    finally:
        client.close()
    return url


def wait_for(check: Callable[[], object], timeout: float = 30, every: float = 0.05) -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {check}")
        time.sleep(every)


class Proc:
    """A `hermes …` child with its output in a file (read it to assert on logs)."""

    def __init__(self, env: dict[str, str], log: Path, *args: str) -> None:
        self.log = log
        self.args = args
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "producers.cli.main", *args],
                env={**env, "PYTHONPATH": str(ROOT)},
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                start_new_session=True,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return int(self.proc.returncode)


def start_worker(env: dict[str, str], home: Path) -> Proc:
    proc = Proc(env, home / "worker.log", "worker", "-c", "4", "-l", "INFO", "-n", "e2e@%h")
    return proc


def start_gateway(env: dict[str, str], home: Path, platform: str, port: int) -> Proc:
    proc = Proc(env, home / f"gateway-{platform}.log", "gateway", platform, "-l", "INFO")

    def healthy() -> bool:
        if proc.proc.poll() is not None:
            raise AssertionError(f"gateway exited: {proc.output()}")
        try:
            answer = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
        except httpx.HTTPError:
            return False
        # Receivers sharing the port answer for each other: wait for this one's own answer
        # (a fresh connection each try, which the kernel may give to either).
        return answer.status_code == 200 and answer.json().get("pid") == proc.proc.pid

    wait_for(healthy, timeout=30)
    return proc
