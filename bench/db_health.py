"""What the state.db checks cost: the open-time look (header, WAL) and quick_check on writes.

    python -m bench.db_health [STORE ...]

For each STORE (default: a small one made here) prints the header check and the WAL check
as every open runs them (in place, read-only: the files are not changed), and quick_check's
time when the file is under the write-path bound. Then the WAL walk alone on synthetic WALs
of 256 KiB and 16 MiB (the autocheckpoint size: the most a WAL left by a crash holds).
"""

from __future__ import annotations

import os
import sqlite3
import struct
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

from shared.db.sqlite_health import (
    QUICK_CHECK_MAX_BYTES,
    _checksum,
    check_file,
    check_wal,
    quick_check,
    wal_damage,
)

ROUNDS = 50


def _ms(action: object, rounds: int = ROUNDS) -> float:
    assert callable(action)
    started = time.perf_counter()
    for _ in range(rounds):
        action()
    return (time.perf_counter() - started) / rounds * 1000


def _small_store(folder: Path) -> Path:
    path = folder / "state.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE t(x)")
    conn.executemany("INSERT INTO t VALUES (?)", [("hello " * 40,)] * 2000)
    conn.commit()
    conn.close()
    return path


def _synthetic_wal(pages: int, page_size: int = 4096) -> bytes:
    salt1, salt2 = 0x1234, 0x5678
    head = struct.pack(">6I", 0x377F0682, 3007000, page_size, 0, salt1, salt2)
    s0, s1 = _checksum(head, 0, 0, False)
    out = [head + struct.pack(">2I", s0, s1)]
    body = bytes(range(256)) * (page_size // 256)
    for n in range(pages):
        frame = struct.pack(">2I", n + 1, n + 1 if n == pages - 1 else 0)
        s0, s1 = _checksum(frame, s0, s1, False)
        s0, s1 = _checksum(body, s0, s1, False)
        out.append(frame + struct.pack(">4I", salt1, salt2, s0, s1) + body)
    return b"".join(out)


def main(paths: list[str]) -> None:
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        stores = [Path(p) for p in paths] or [_small_store(Path(tmp))]
        for path in stores:
            size = path.stat().st_size
            print(f"{path} ({size / 1e6:,.1f} MB)")
            print(f"  header check        {_ms(lambda p=path: check_file(p)):8.3f} ms")
            print(f"  WAL check           {_ms(lambda p=path: check_wal(p)):8.3f} ms")
            if size <= QUICK_CHECK_MAX_BYTES:
                uri = f"file:{quote(str(path))}?mode=ro"
                conn = sqlite3.connect(uri, uri=True)
                took = _ms(lambda c=conn, p=path: quick_check(c, p), 10)
                conn.close()
                print(f"  quick_check         {took:8.3f} ms")
            else:
                print(f"  quick_check         skipped (over {QUICK_CHECK_MAX_BYTES:,} bytes)")
        for pages in (64, 4096):
            data = _synthetic_wal(pages)
            assert wal_damage(data) is None
            rounds = 20 if pages < 1000 else 3
            took = _ms(lambda d=data: wal_damage(d), rounds)
            print(f"  WAL walk, {len(data) / 1e6:6.2f} MB  {took:8.1f} ms")


if __name__ == "__main__":
    main(sys.argv[1:])
