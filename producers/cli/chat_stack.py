"""The stack a chat needs: with nothing running, start the embedded broker and one worker.

If `HERMES_BROKER_URL` is set, the fleet's broker and workers are used as they are. Otherwise,
if the embedded broker under HERMES_HOME answers (`hermes up`, or another chat), it is used.
Else this chat starts the embedded Redis and one `hermes worker` (threads) and stops them when
the last chat using them leaves: every chat holds a shared lock on `run/chat.clients`, and the
one that finds itself alone on the way out stops what was recorded in `run/chat-stack.json`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from producers.cli.up import hermes_argv
from producers.stack.embedded_redis import EmbeddedRedis, is_alive
from shared.settings import Settings

WORKER_THREADS = "8"
STOP_GRACE = 10.0


@contextlib.contextmanager
def _mutex(path: Path) -> Iterator[None]:
    with path.open("a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _ours(pid: int, marker: str) -> bool:
    """The pid still runs the program we recorded (a reused pid is left alone)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.exists():
        return True  # no /proc here: trust the record
    try:
        return marker.encode() in cmdline.read_bytes()
    except OSError:
        return False


def _stop_pid(pid: int, marker: str) -> None:
    if not _ours(pid, marker):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE
    while time.monotonic() < deadline and _ours(pid, marker):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
    if _ours(pid, marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


class WorkerExited(Exception):
    """The worker this chat started is gone: no reply will come."""


class ChatStack:
    def __init__(self, settings: Settings, say: Callable[[str], None]) -> None:
        self.settings = settings
        self.say = say
        self.run_dir = settings.run_dir
        self._clients: IO[str] | None = None
        self._broker: EmbeddedRedis | None = None
        self._worker: subprocess.Popen[bytes] | None = None

    @property
    def chat_owned(self) -> bool:
        """A chat started the stack this one uses: the last chat out stops it."""
        return self._clients is not None and self.record.exists()

    @property
    def record(self) -> Path:
        return self.run_dir / "chat-stack.json"

    def ensure(self) -> None:
        if not self.settings.uses_embedded_broker:
            return  # a fleet broker: its workers are run by the operator
        self.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._clients = (self.run_dir / "chat.clients").open("a+")
        fcntl.flock(self._clients, fcntl.LOCK_SH)
        with _mutex(self.run_dir / "chat.lock"):
            if is_alive(self.settings.embedded_broker_socket):
                self.say("Using the hermes stack already running on this machine.")
                return
            self._start()

    def _start(self) -> None:
        self.say("Starting a local worker…")
        broker = EmbeddedRedis(self.run_dir)
        broker.start()
        self._broker = broker
        log = (self.run_dir / "chat-worker.log").open("ab")
        # --skip-missing-sdks: a platform whose SDK is missing must not keep the terminal's
        # own turns from running (the chat says so once; `hermes up` and `hermes worker` refuse).
        argv = hermes_argv(
            "worker", "-P", "threads", "-c", WORKER_THREADS, "-l", "WARNING",
            "-n", f"chat{os.getpid()}@%h", "--skip-missing-sdks",
        )  # fmt: skip
        try:
            self._worker = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        finally:
            log.close()
        socket = str(broker.socket_path)
        record = {"redis": broker.pid, "worker": self._worker.pid, "socket": socket}
        self.record.write_text(json.dumps(record))  # for the last chat out to stop

    def check_worker(self) -> None:
        """Raise WorkerExited if the worker this chat started has exited (a broken install,
        a crash): waiting for its reply would spin forever."""
        if self._worker is None or self._worker.poll() is None:
            return
        log = self.run_dir / "chat-worker.log"
        last = ""
        with contextlib.suppress(OSError):
            lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
            last = f": {lines[-1].strip()}" if lines else ""
        raise WorkerExited(
            f"the local worker exited (code {self._worker.returncode}){last}; see {log}"
        )

    def close(self) -> None:
        if self._clients is None:
            return
        self._clients.close()  # our shared lock goes with it
        self._clients = None
        with _mutex(self.run_dir / "chat.lock"):
            with (self.run_dir / "chat.clients").open("a+") as probe:
                try:
                    fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return  # another chat still uses the stack; the last one out stops it
            self._stop_recorded()

    def _stop_recorded(self) -> None:
        try:
            record = json.loads(self.record.read_text())
        except (OSError, ValueError):
            return  # not started by a chat (hermes up runs it), or already stopped
        if self._worker is not None:
            self._worker.send_signal(signal.SIGTERM)
            try:
                self._worker.wait(timeout=STOP_GRACE)
            except subprocess.TimeoutExpired:
                self._worker.kill()
                self._worker.wait()
        elif isinstance(record.get("worker"), int):
            _stop_pid(record["worker"], "worker")
        if self._broker is not None:
            self._broker.stop()
        elif isinstance(record.get("redis"), int):
            _stop_pid(record["redis"], "redis")
            with contextlib.suppress(FileNotFoundError):
                Path(record.get("socket") or self.settings.embedded_broker_socket).unlink()
        self.record.unlink(missing_ok=True)
        self.say("Stopped the local worker.")
