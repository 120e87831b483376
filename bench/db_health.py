"""What the state.db checks cost: the open-time look (header, WAL) and quick_check on writes.

    python bench/db_health.py [--quick] [STORE ...]

For each STORE (default: a small one made here) prints the header check and the WAL check
as every open runs them (in place, read-only: the files are not changed), and quick_check's
time when the file is under the write-path bound. Then the WAL walk alone on synthetic WALs
of 256 KiB and 16 MiB (the autocheckpoint size: the most a WAL left by a crash holds).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import struct
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (< 60 s; it is)")
    parser.add_argument("stores", nargs="*", help="state.db files to look at (read-only)")
    args = parser.parse_args(argv)
    rounds = 10 if args.quick else ROUNDS
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    result: dict[str, float | None] = {}
    with tempfile.TemporaryDirectory() as tmp:
        stores = [Path(p) for p in args.stores] or [_small_store(Path(tmp))]
        for n, path in enumerate(stores):
            size = path.stat().st_size
            header = _ms(lambda p=path: check_file(p), rounds)
            wal = _ms(lambda p=path: check_wal(p), rounds)
            print(f"{path} ({size / 1e6:,.1f} MB)")
            print(f"  header check        {header:8.3f} ms")
            print(f"  WAL check           {wal:8.3f} ms")
            quick: float | None = None
            if size <= QUICK_CHECK_MAX_BYTES:
                conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)
                quick = _ms(lambda c=conn, p=path: quick_check(c, p), 10)
                conn.close()
                print(f"  quick_check         {quick:8.3f} ms")
            else:
                print(f"  quick_check         skipped (over {QUICK_CHECK_MAX_BYTES:,} bytes)")
            result |= {f"header_ms_{n}": header, f"wal_ms_{n}": wal, f"quick_check_ms_{n}": quick}
        for pages in (64, 4096):
            data = _synthetic_wal(pages)
            assert wal_damage(data) is None
            took = _ms(lambda d=data: wal_damage(d), 20 if pages < 1000 else 3)
            print(f"  WAL walk, {len(data) / 1e6:6.2f} MB  {took:8.1f} ms")
            result[f"wal_walk_ms_{pages}_pages"] = took
    print(json.dumps({k: round(v, 3) if v is not None else None for k, v in result.items()}))


if __name__ == "__main__":
    main()
