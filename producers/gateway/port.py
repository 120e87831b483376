"""Who may listen on a receiver port: the receivers of one stack, and nobody else.

A stack is one HERMES_HOME with its database and broker; `stack_id` names it (a hash of
those, credentials left out). Receivers bind with SO_REUSEPORT so that the one process per
platform `hermes up` starts can share `gateway.port` — but the kernel lets any process of the
same user join such a port, and a second stack's receiver would then silently take some of
the first stack's webhooks into its own state.db. So before binding:

1. A registry per port (`<tmp>/hermes-ports-<uid>/<port>.json`: stack id, home, pids) is read
   and written under an exclusive lock on `<port>.lock`. The lock is held across the check
   *and* the bind, so two stacks starting at once cannot both find the port free.
2. The registry names another stack with a live process and the port answers: refused with
   that stack's home. (Dead pids are dropped; a live pid on a port that no longer answers is a
   reused pid, and is dropped too.)
3. Nothing live in the registry but the port answers (a receiver of a stack whose temp folder
   we do not share, or another program): its `GET /healthz` says whose it is — the same stack
   may join, anything else is refused.

The registry is a guard between processes of this machine; the probe is the truth of what
listens. Together they also tell "another hermes" (and whose) from "another program".
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import socket
import stat
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from shared.settings import Settings

PROBE_TIMEOUT = 3.0
WILDCARDS = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}


class PortInUse(RuntimeError):
    """The port belongs to another stack or another program; the message says whose."""


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit(parts._replace(netloc=f"{user}{host}"))


def stack_id(settings: Settings) -> str:
    """This stack's name: its home, database and broker (passwords left out, so the id can be
    shown by /healthz)."""
    material = "\0".join(
        [
            str(settings.home.resolve()),
            _without_password(settings.resolved_database_url),
            _without_password(settings.resolved_broker_url),
        ]
    )
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def registry_dir() -> Path:
    """This user's port registry (SO_REUSEPORT joins only sockets of one user anyway)."""
    folder = Path(tempfile.gettempdir()) / f"hermes-ports-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise PortInUse(f"{folder} is not a private folder of this user: not using it")
    return folder


@dataclass
class Entry:
    stack: str
    home: str
    host: str
    pids: list[int] = field(default_factory=list)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read(path: Path) -> Entry | None:
    try:
        data = json.loads(path.read_text())
        pids = [int(p) for p in data["pids"]]
        return Entry(str(data["stack"]), str(data["home"]), str(data["host"]), pids)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write(path: Path, entry: Entry) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    record = {"stack": entry.stack, "home": entry.home, "host": entry.host, "pids": entry.pids}
    partial.write_text(json.dumps(record))
    os.replace(partial, path)


@contextlib.contextmanager
def _locked(port: int) -> Iterator[Path]:
    folder = registry_dir()
    handle: IO[str]
    with (folder / f"{port}.lock").open("a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield folder / f"{port}.json"
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _answers(host: str, port: int) -> bool:
    """Something accepts connections on the port (where we would listen)."""
    try:
        with socket.create_connection((WILDCARDS.get(host, host), port), timeout=PROBE_TIMEOUT):
            return True
    except OSError:
        return False


def _healthz_stack(host: str, port: int) -> str | None:
    """The stack id a receiver on the port reports, or None when it is not a hermes receiver."""
    where = WILDCARDS.get(host, host)
    if ":" in where:
        where = f"[{where}]"
    try:
        answer = httpx.get(f"http://{where}:{port}/healthz", timeout=PROBE_TIMEOUT)
        body: Any = answer.json()
    except (httpx.HTTPError, ValueError):
        return None
    stack = body.get("stack") if isinstance(body, dict) else None
    return stack if isinstance(stack, str) else None


def _refusal(settings: Settings, entry: Entry | None) -> str | None:
    """Why this stack may not listen on its port now, or None (call under the lock)."""
    host, port = settings.gateway.host, settings.gateway.port
    ours = stack_id(settings)
    live = [pid for pid in entry.pids if _alive(pid)] if entry is not None else []
    if entry is not None and live and entry.stack != ours and _answers(entry.host, port):
        return f"port {port} is in use by another hermes (home {entry.home})"
    if entry is not None and live and entry.stack == ours:
        return None
    if not _answers(host, port):
        return None
    found = _healthz_stack(host, port)
    if found == ours:
        return None
    if found is not None:
        return f"port {port} is in use by another hermes (stack {found}, home unknown)"
    return f"port {port} is in use by another program (not a hermes receiver)"


def check(settings: Settings) -> str | None:
    """The refusal a receiver of this stack would meet on `gateway.port` now, or None."""
    with _locked(settings.gateway.port) as path:
        return _refusal(settings, _read(path))


@dataclass
class Claim:
    """A listening socket on the stack's port, registered; `release` when the receiver stops."""

    sock: socket.socket
    port: int
    stack: str

    def release(self) -> None:
        with _locked(self.port) as path:
            entry = _read(path)
            if entry is None or entry.stack != self.stack:
                return
            entry.pids = [pid for pid in entry.pids if pid != os.getpid() and _alive(pid)]
            _write(path, entry)


def claim(settings: Settings, bind: Callable[[str, int], socket.socket]) -> Claim:
    """Bind `gateway.host:gateway.port` with `bind` if only this stack listens there."""
    host, port = settings.gateway.host, settings.gateway.port
    ours = stack_id(settings)
    with _locked(port) as path:
        entry = _read(path)
        problem = _refusal(settings, entry)
        if problem is not None:
            raise PortInUse(problem)
        sock = bind(host, port)
        pids = [p for p in entry.pids if _alive(p)] if entry and entry.stack == ours else []
        home = str(settings.home.resolve())
        _write(path, Entry(ours, home, host, [*pids, os.getpid()]))
    return Claim(sock, port, ours)
