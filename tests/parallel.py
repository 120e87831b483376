"""The suite in parallel (`pytest -n N --dist loadgroup`, pytest-xdist): services per worker.

Tests flush the numbered Redis dbs they hand out and clear every db's fleet keys
(conftest.redis_url); the contract suite keeps each test's tables in a schema of its own but
clears the contract database's `public` of anything a process left there. Two tests at once on
the same Redis or the same databases would wipe each other's keys and tables. So each xdist
worker (PYTEST_XDIST_WORKER: gw0, gw1 …) gets:

- a redis-server of its own on a free port, started when a test first asks for Redis and
  stopped with the worker (it also dies with it: PR_SET_PDEATHSIG);
- PostgreSQL databases of its own: `<db>_gw0`, `<db>_gw0_contract` (made when missing).

Tests that build hosts of their own (network namespaces, a cluster of real processes) are
heavy and timing-sensitive: they all run on one worker, one after another (the `serial`
group; see conftest.pytest_collection_modifyitems). Without -n nothing here changes anything.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import time

WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # None: not a parallel run

# The markers of tests that run in one group, on one worker: they start clusters of processes,
# kill and pause them, and wait on what follows.
SERIAL_MARKERS = ("netns", "slow")

_redis: list[tuple[int, subprocess.Popen[bytes]]] = []
_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded here: the child only calls into it
PR_SET_PDEATHSIG = 1


def postgres_db(base: str) -> str:
    """The PostgreSQL database this process's tests use: `base`, or `base_gwN` in a worker."""
    return base if WORKER is None else f"{base}_{WORKER}"


def redis_port(base: int) -> int:
    """The Redis port this process's tests use: `base`, or a worker's own redis-server."""
    if WORKER is None:
        return base
    if not _redis:
        _redis.append(_start_redis())
        atexit.register(_stop_redis)
    return _redis[0][0]


def _start_redis() -> tuple[int, subprocess.Popen[bytes]]:
    server = shutil.which("redis-server")
    if server is None:
        raise RuntimeError(f"pytest worker {WORKER}: redis-server is not installed")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [server, "--bind", "127.0.0.1", "--port", str(port), "--save", ""]
    argv += ["--appendonly", "no", "--loglevel", "warning"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, preexec_fn=_die_with_parent)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return port, proc
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.02)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"pytest worker {WORKER}: its redis-server on port {port} did not start")


def _die_with_parent() -> None:
    """In the forked child, before exec: SIGTERM when the worker that started it dies, even by
    SIGKILL (atexit then never runs)."""
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _stop_redis() -> None:
    for _, proc in _redis:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
