"""Hosts for multi-host tests: Linux network namespaces on a bridge this test makes and removes.

`Network` creates, as root, one bridge in the test's own namespace (it gets `.1` of a private
/24 in 10.231.0.0/16 that no interface here uses yet) and one namespace per host, each joined
to the bridge by a veth pair and given one address of that /24. Nothing else is routed: a host
reaches only 127.0.0.0/8 inside itself and the addresses of these namespaces (and the bridge,
where the test serves its fakes). `cut`/`restore` take a host's veth down and up;
`kill_host` SIGKILLs every process in a namespace.

Everything is registered under /run/hermes-netns/<tag>.json before it is made, and `close`
removes it all (processes, namespaces, the bridge, directories such as a PostgreSQL cluster).
A run killed before it could clean up (SIGKILL, a crash) is swept by the next run: `sweep_stale`
removes every registered set whose creating process is gone.

`Postgres` is a throwaway cluster (`initdb` with trust auth, `pg_ctl` as the postgres user)
and `Redis` a redis-server without persistence, both inside a host namespace.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REGISTRY = Path("/run/hermes-netns")
PREFIX = "hf"  # every name made here starts with hf<tag>


class NetnsUnavailable(RuntimeError):
    """This machine or user cannot make network namespaces (not root, no `ip`, no CAP_NET_ADMIN)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def available(*tools: str) -> str | None:
    """None when namespaces can be made here and `tools` are on PATH, else why not."""
    if os.geteuid() != 0:
        return "needs root (ip netns add)"
    missing = [tool for tool in ("ip", *tools) if shutil.which(tool) is None]
    if missing:
        return f"not installed: {', '.join(missing)}"
    probe = f"{PREFIX}probe{secrets.token_hex(2)}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` refused: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _free_subnet() -> ipaddress.IPv4Network:
    used = _ip("-4", "-o", "addr", "show").stdout
    routes = _ip("-4", "route", "show", "table", "all").stdout
    for third in secrets.SystemRandom().sample(range(1, 255), 254):
        net = ipaddress.IPv4Network(f"10.231.{third}.0/24")
        if f"10.231.{third}." not in used and f"10.231.{third}." not in routes:
            return net
    raise NetnsUnavailable("no free /24 in 10.231.0.0/16")


@dataclass
class Host:
    """One namespace: its name, the bridge side of its veth, its address."""

    role: str
    ns: str
    veth: str
    ip: str

    def argv(self, *command: str) -> list[str]:
        """`command` run inside this host (ip netns exec execs it: the pid is the command's)."""
        return ["ip", "netns", "exec", self.ns, *command]


@dataclass
class Network:
    tag: str = field(default_factory=lambda: secrets.token_hex(2))
    subnet: ipaddress.IPv4Network = field(default_factory=_free_subnet)
    hosts: dict[str, Host] = field(default_factory=dict)
    dirs: list[str] = field(default_factory=list)
    postmasters: list[int] = field(default_factory=list)  # pids of the clusters started here

    @property
    def bridge(self) -> str:
        return f"{PREFIX}{self.tag}br"

    @property
    def gateway_ip(self) -> str:
        """The bridge's address in the test's own namespace (the fakes listen there)."""
        return str(self.subnet[1])

    def _record(self) -> None:
        REGISTRY.mkdir(mode=0o700, exist_ok=True)
        entry = {
            "pid": os.getpid(),
            "started": _start_time(os.getpid()),
            "bridge": self.bridge,
            "namespaces": [h.ns for h in self.hosts.values()],
            "dirs": self.dirs,
        }
        path = REGISTRY / f"{self.tag}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(entry))
        tmp.replace(path)

    def open(self) -> Network:
        self._record()
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway_ip}/{self.subnet.prefixlen}", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        return self

    def add_host(self, role: str) -> Host:
        """A namespace named hf<tag>-<role> at the next address, its veth on the bridge."""
        index = len(self.hosts) + 2
        host = Host(
            role,
            f"{PREFIX}{self.tag}-{role}",
            f"{PREFIX}{self.tag}{role}"[:15],
            str(self.subnet[index]),
        )
        self.hosts[role] = host
        self._record()  # registered before it exists: an interrupted setup is swept too
        peer = f"{host.veth[:13]}p"
        _ip("netns", "add", host.ns)
        _ip("link", "add", host.veth, "type", "veth", "peer", "name", peer)
        _ip("link", "set", peer, "netns", host.ns)
        _ip("link", "set", host.veth, "master", self.bridge, "up")
        inside = ["-n", host.ns]
        _ip(*inside, "link", "set", peer, "name", "eth0")
        _ip(*inside, "addr", "add", f"{host.ip}/{self.subnet.prefixlen}", "dev", "eth0")
        _ip(*inside, "link", "set", "eth0", "up")
        _ip(*inside, "link", "set", "lo", "up")
        return host

    def temp_dir(self, name: str, owner: str | None = None) -> Path:
        """A directory removed with the network (registered, so a killed run's is swept too)."""
        path = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{self.tag}-{name}-"))
        self.dirs.append(str(path))
        self._record()
        if owner is not None:
            record = pwd.getpwnam(owner)
            os.chown(path, record.pw_uid, record.pw_gid)
        return path

    def cut(self, host: Host) -> None:
        _ip("link", "set", host.veth, "down")

    def restore(self, host: Host) -> None:
        _ip("link", "set", host.veth, "up")

    def pids(self, host: Host) -> list[int]:
        return _ns_pids(host.ns)

    def kill_host(self, host: Host) -> list[int]:
        """SIGKILL every process in the host's namespace; returns their pids."""
        return _kill_all(host.ns)

    def close(self) -> None:
        _remove(self.bridge, [h.ns for h in self.hosts.values()], self.dirs)
        with contextlib.suppress(FileNotFoundError):
            (REGISTRY / f"{self.tag}.json").unlink()

    def __enter__(self) -> Network:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def network_for_test(*tools: str) -> Iterator[Network]:
    """A fresh Network for one test, removed after it (and checked gone); the test skips where
    namespaces are not permitted, except under CI=true, where it fails. `tools`: what else the
    test runs inside its hosts."""
    import pytest

    why = available(*tools)
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"network namespaces are required under CI: {why}")
        pytest.skip(f"network namespaces not permitted here: {why}")
    sweep_stale()
    # SIGTERM (a CI job cancelled) unwinds like Ctrl-C, so the teardown below still runs.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    net = Network()
    try:
        net.open()
        yield net
    finally:
        net.close()
        signal.signal(signal.SIGTERM, previous)
        left = leftovers(net.tag, net.postmasters)
        assert not left, f"left behind: {left}"


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _start_time(pid: int) -> str | None:
    """When `pid` started (a pid reused since has another), None if it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def _ns_pids(ns: str) -> list[int]:
    found = _ip("netns", "pids", ns, check=False)
    return [int(p) for p in found.stdout.split()] if found.returncode == 0 else []


def _kill_all(ns: str) -> list[int]:
    """SIGKILL everything in `ns` until nothing is left there (forks race the first pass)."""
    killed: list[int] = []
    deadline = time.monotonic() + 20
    while (pids := _ns_pids(ns)) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        killed += pids
        time.sleep(0.05)
    return sorted(set(killed))


def _stop_postgres(data: str) -> None:
    """Stop a cluster of ours that is still running: a SIGKILLed postmaster would leave its
    shared memory (a SysV segment, files in /dev/shm) behind; a stopped one removes them."""
    if not (Path(data) / "postmaster.pid").exists():
        return
    stop = ["runuser", "-u", "postgres", "--", "pg_ctl", "-D", data, "-m", "immediate", "-w"]
    with contextlib.suppress(subprocess.SubprocessError, OSError):
        subprocess.run([*stop, "stop"], capture_output=True, timeout=60, check=False)


def _remove(bridge: str, namespaces: list[str], dirs: list[str]) -> None:
    for path in dirs:
        _stop_postgres(path)
    for ns in namespaces:
        _kill_all(ns)
    for ns in namespaces:
        _ip("netns", "del", ns, check=False)  # its end of the veth pair goes with it
    for line in _ip("-o", "link", "show", "master", bridge, check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        _ip("link", "del", name, check=False)
    _ip("link", "del", bridge, check=False)
    for path in dirs:
        shutil.rmtree(path, ignore_errors=True)


def sweep_stale() -> list[str]:
    """Remove what a run that died without cleaning up registered; returns their tags."""
    swept = []
    for entry in sorted(REGISTRY.glob("*.json")) if REGISTRY.is_dir() else []:
        try:
            record = json.loads(entry.read_text())
        except (OSError, ValueError):
            continue
        pid = int(record["pid"])
        if _start_time(pid) is not None and _start_time(pid) == record.get("started"):
            continue  # its run is still going
        _remove(record["bridge"], list(record["namespaces"]), list(record["dirs"]))
        entry.unlink(missing_ok=True)
        swept.append(entry.stem)
    return swept


def leftovers(tag: str, postmasters: list[int] | tuple[int, ...] = ()) -> list[str]:
    """Anything of run `tag` still present: namespaces, links, directories, and the shared
    memory of its PostgreSQL clusters (its processes went with the namespaces: see _kill_all)."""
    found = [ns for ns in _ip("netns", "list").stdout.split() if ns.startswith(f"{PREFIX}{tag}")]
    found += [
        line.split(":")[1].strip()
        for line in _ip("-o", "link", "show").stdout.splitlines()
        if line.split(":")[1].strip().startswith(f"{PREFIX}{tag}")
    ]
    found += [str(p) for p in Path(tempfile.gettempdir()).glob(f"{PREFIX}{tag}-*")]
    for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]:
        fields = line.split()  # key shmid perms size cpid lpid nattch …
        if int(fields[4]) in postmasters:
            found.append(f"SysV shared memory {fields[1]} of postmaster {fields[4]}")
    return found


class Redis:
    """redis-server inside `host`, no persistence, on its address only."""

    def __init__(self, host: Host, workdir: Path, port: int = 16379) -> None:
        self.host, self.port = host, port
        where = ["--bind", host.ip, "--port", str(port), "--dir", str(workdir)]
        volatile = ["--save", "", "--appendonly", "no", "--protected-mode", "no"]
        self.proc = subprocess.Popen(
            host.argv("redis-server", *where, *volatile),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    @property
    def url(self) -> str:
        return f"redis://{self.host.ip}:{self.port}/0"


class Postgres:
    """A throwaway PostgreSQL cluster inside `host`: trust auth for the network's /24 only."""

    def __init__(self, network: Network, host: Host, port: int = 5432) -> None:
        self.host, self.port = host, port
        self.data = network.temp_dir("pg", owner="postgres")
        as_postgres = ["runuser", "-u", "postgres", "--"]
        initdb = ["initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync"]
        subprocess.run(
            [*as_postgres, *initdb, "-E", "UTF8", "--locale", "C"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        with (self.data / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {network.subnet} trust\n")
        options = (
            f"-c listen_addresses={host.ip} -p {port} -k {self.data} -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=400"
        )
        log = str(self.data / "server.log")
        pg_ctl = ["pg_ctl", "-D", str(self.data), "-l", log, "-w", "-t", "60", "-o", options]
        subprocess.run(
            host.argv(*as_postgres, *pg_ctl, "start"),
            check=True,
            capture_output=True,
            timeout=90,
        )
        self.pid = int((self.data / "postmaster.pid").read_text().split()[0])
        network.postmasters.append(self.pid)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@{self.host.ip}:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)
