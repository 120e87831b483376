"""Drills: a damaged or unusable state.db × every command that opens it (issue 21, items 6, 11).

Each case copies a small healthy store, damages it, runs one `hermes` command in a subprocess
and checks: it exits non-zero with ONE line on stderr and every file (state.db, -wal, -shm)
byte-identical; or, for damage that reads cannot see (random bytes in a data page, a
read-only file, a full disk), the reads work and the writes are refused in one line.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("state.db", "state.db-wal", "state.db-shm")
SESSION = "20250101_000000_abcdef"
READS = {
    "list": ("sessions", "list"),
    "stats": ("sessions", "stats"),
    "search": ("sessions", "search", "hello"),
    "export": ("sessions", "export", "-"),
    "status": ("db", "status"),
    "check": ("db", "check"),
    "insights": ("insights",),
}
WRITES = {
    "import": ("sessions", "import", "IMPORT"),
    "rename": ("sessions", "rename", SESSION, "New", "name"),
    "delete": ("sessions", "delete", "20250102_000000_abcdef", "--yes"),
    "prune": ("sessions", "prune", "--older-than", "1", "--yes"),
    "upgrade": ("db", "upgrade"),
}
COMMANDS = {**READS, **WRITES}


def _lines(count: int, first: int = 1) -> str:
    rows = []
    for i in range(first, first + count):
        message = {"role": "user", "content": f"hello world {i} " * 50, "timestamp": 1.7e9 + i}
        rows.append(
            json.dumps(
                {
                    "id": f"2025010{i}_000000_abcdef",
                    "source": "cli",
                    "started_at": 1.7e9 + i,
                    "ended_at": 1.7e9 + i + 5,
                    "title": f"T{i}",
                    "messages": [message] * 20,
                }
            )
        )
    return "\n".join(rows) + "\n"


def _env(home: Path, base: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in base.items() if not k.startswith("HERMES_")}
    env["HERMES_HOME"] = str(home)
    return env


def hermes(home: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "producers.cli.main", *args],
        env=_env(home, env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small store (7 sessions, 140 messages) built once, and a file to import."""
    home = tmp_path_factory.mktemp("healthy")
    (home / "in.jsonl").write_text(_lines(7))
    done = hermes(home, dict(os.environ), "sessions", "import", str(home / "in.jsonl"))
    assert done.returncode == 0, done.stderr
    (home / "more.jsonl").write_text(_lines(1, first=8))
    return home


def digest(home: Path) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in NAMES:
        path = home / name
        out[name] = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None
    return out


# --- damages: each changes a copied home in place ---


def truncated(home: Path) -> None:
    db = home / "state.db"
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 2])


def random_mid(home: Path) -> None:
    db = home / "state.db"
    data = bytearray(db.read_bytes())
    mid = len(data) // 2
    rnd = random.Random(1)
    data[mid : mid + 8192] = bytes(rnd.getrandbits(8) for _ in range(8192))
    db.write_bytes(bytes(data))


def zero_byte(home: Path) -> None:
    (home / "state.db").write_bytes(b"")


def future_schema(home: Path) -> None:
    conn = sqlite3.connect(home / "state.db")
    conn.execute("UPDATE alembic_version SET version_num = '9999_future'")
    conn.commit()
    conn.close()


def foreign(home: Path) -> None:
    (home / "state.db").unlink()
    conn = sqlite3.connect(home / "state.db")
    conn.execute("CREATE TABLE t(x)")
    conn.commit()
    conn.close()


def corrupt_wal(home: Path) -> None:
    """A crash with committed frames in the WAL (copied while the writer had it open), then
    bytes flipped in its first frame."""
    db = home / "state.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    for i in range(3):
        conn.execute("UPDATE sessions SET title = ? WHERE id = ?", (f"changed {i}", SESSION))
        conn.commit()
    saved = {name: (home / name).read_bytes() for name in ("state.db", "state.db-wal")}
    conn.close()
    for name, data in saved.items():
        (home / name).write_bytes(data)
    (home / "state.db-shm").unlink(missing_ok=True)
    wal = bytearray((home / "state.db-wal").read_bytes())
    wal[100:200] = b"\xff" * 100
    (home / "state.db-wal").write_bytes(bytes(wal))


REFUSED: dict[str, Callable[[Path], None]] = {
    "truncated": truncated,
    "zero_byte": zero_byte,
    "future_schema": future_schema,
    "foreign": foreign,
    "corrupt_wal": corrupt_wal,
}


def _case(healthy: Path, where: Path, name: str) -> Path:
    home = where / name
    shutil.copytree(healthy, home, ignore=shutil.ignore_patterns("*.lock"))
    return home


def _run_all(
    healthy: Path, where: Path, damage: Callable[[Path], None], env: dict[str, str]
) -> dict[str, tuple[subprocess.CompletedProcess[str], bool]]:
    """Each command on its own damaged copy (four at a time): (result, files unchanged)."""

    def one(name: str) -> tuple[subprocess.CompletedProcess[str], bool]:
        home = _case(healthy, where, name)
        damage(home)
        before = digest(home)
        args = [str(healthy / "more.jsonl") if a == "IMPORT" else a for a in COMMANDS[name]]
        done = hermes(home, env, *args)
        return done, digest(home) == before

    with ThreadPoolExecutor(4) as pool:
        return dict(zip(COMMANDS, pool.map(one, COMMANDS), strict=True))


def _one_line(done: subprocess.CompletedProcess[str]) -> bool:
    return len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


@pytest.mark.parametrize("damage", sorted(REFUSED))
def test_every_command_refuses_in_one_line_and_changes_nothing(
    healthy: Path, tmp_path: Path, hermes_env: dict[str, str], damage: str
) -> None:
    results = _run_all(healthy, tmp_path, REFUSED[damage], hermes_env)
    for name, (done, same) in results.items():
        assert done.returncode != 0, (name, done.stdout[-300:])
        assert _one_line(done), (name, done.stderr)
        assert same, (name, done.stderr)


def test_zero_byte_file_named_as_such(healthy: Path, tmp_path: Path, hermes_env: dict) -> None:
    home = _case(healthy, tmp_path, "zero")
    zero_byte(home)
    done = hermes(home, hermes_env, "sessions", "list")
    assert "is 0 bytes" in done.stderr and "move it away" in done.stderr
    assert sorted(p.name for p in home.iterdir() if p.name.startswith("state.db")) == ["state.db"]


def test_corrupt_wal_names_the_frames_it_would_lose(
    healthy: Path, tmp_path: Path, hermes_env: dict
) -> None:
    home = _case(healthy, tmp_path, "wal")
    corrupt_wal(home)
    done = hermes(home, hermes_env, "db", "check")
    assert done.returncode == 1
    assert re.search(r"frame 1 is damaged and \d+ committed frames follow it", done.stderr)


def test_random_bytes_mid_file_reads_may_work_writes_refused(
    healthy: Path, tmp_path: Path, hermes_env: dict[str, str]
) -> None:
    results = _run_all(healthy, tmp_path, random_mid, hermes_env)
    for name, (done, same) in results.items():
        assert same, (name, done.stderr)
        assert done.returncode == 0 or _one_line(done), (name, done.stderr)
    for name in WRITES:
        done = results[name][0]
        assert done.returncode != 0 and "hermes db check" in done.stderr, (name, done.stderr)
    for name in ("check", "status"):
        assert results[name][0].returncode == 1, results[name][0].stdout


def _root_mounts() -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a read-only file or a small tmpfs needs root")


@contextmanager
def read_only_file(path: Path) -> Iterator[None]:
    """`path` on a read-only bind mount of itself (its folder stays writable)."""
    subprocess.run(["mount", "--bind", str(path), str(path)], check=True)
    try:
        done = subprocess.run(
            ["mount", "-o", "remount,ro,bind", str(path)], capture_output=True, text=True
        )
        if done.returncode:
            pytest.skip(f"cannot remount read-only here: {done.stderr.strip()}")
        yield
    finally:
        subprocess.run(["umount", str(path)], check=True)


def test_read_only_state_db_reads_work_writes_refused(
    healthy: Path, tmp_path: Path, hermes_env: dict[str, str]
) -> None:
    _root_mounts()
    home = _case(healthy, tmp_path, "ro")
    with read_only_file(home / "state.db"):
        before = digest(home)
        for name, args in COMMANDS.items():
            args = tuple(str(healthy / "more.jsonl") if a == "IMPORT" else a for a in args)
            done = hermes(home, hermes_env, *args)
            if name in WRITES:
                assert done.returncode != 0, name
                assert _one_line(done) and "is read-only" in done.stderr, (name, done.stderr)
            else:
                assert done.returncode == 0, (name, done.stderr)
        up = hermes(home, hermes_env, "up", "--no-beat")
        assert up.returncode != 0 and "is read-only" in up.stderr, up.stderr
        assert _one_line(up), up.stderr
        assert digest(home)["state.db"] == before["state.db"]


def test_full_disk_writes_refused_in_one_line_reads_work(
    healthy: Path, tmp_path: Path, hermes_env: dict[str, str]
) -> None:
    _root_mounts()
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], check=True)
    try:
        home = mount / "home"
        home.mkdir()
        shutil.copy2(healthy / "state.db", home / "state.db")
        filler = mount / "filler"
        with filler.open("wb", buffering=0) as out, pytest.raises(OSError):
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        before = digest(home)
        for name, args in COMMANDS.items():
            args = tuple(str(healthy / "more.jsonl") if a == "IMPORT" else a for a in args)
            done = hermes(home, hermes_env, *args)
            assert done.returncode == 0 or _one_line(done), (name, done.stderr)
            if name in ("import", "rename", "delete"):
                assert done.returncode != 0, name
        assert digest(home)["state.db"] == before["state.db"]
    finally:
        subprocess.run(["umount", str(mount)], check=True)
