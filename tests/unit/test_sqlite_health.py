"""The open-time looks at a SQLite file: header sanity and the WAL walk, on real files."""

from __future__ import annotations

import shutil
import sqlite3
import struct
from pathlib import Path

import pytest

from shared.db.errors import StoreError
from shared.db.sqlite_health import check_file, check_wal, header_problem, wal_damage


def _crashed(folder: Path, commits: int = 3) -> tuple[Path, bytes]:
    """A database and the WAL a crash left beside it (committed frames not checkpointed)."""
    db = folder / "a.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("CREATE TABLE t(x)")
    conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for i in range(commits):
        conn.execute("INSERT INTO t VALUES (?)", (f"row {i}" * 100,))
        conn.commit()
    wal = Path(f"{db}-wal").read_bytes()
    saved = db.read_bytes()
    conn.close()
    db.write_bytes(saved)
    return db, wal


def test_a_healthy_wal_is_none(tmp_path: Path) -> None:
    _db, wal = _crashed(tmp_path)
    assert wal and wal_damage(wal) is None
    assert wal_damage(b"") is None and wal_damage(b"\0" * 40) is None


def test_a_damaged_first_frame_with_commits_after_it_is_reported(tmp_path: Path) -> None:
    _db, wal = _crashed(tmp_path)
    damaged = bytearray(wal)
    damaged[100:200] = b"\xff" * 100
    found = wal_damage(bytes(damaged))
    assert found is not None and found.startswith("frame 1 is damaged and ")


def test_a_torn_last_frame_is_what_a_crash_leaves(tmp_path: Path) -> None:
    _db, wal = _crashed(tmp_path)
    torn = bytearray(wal)
    torn[-50:] = b"\0" * 50
    assert wal_damage(bytes(torn)) is None
    assert wal_damage(wal[:-1000]) is None  # cut short mid-frame


def test_replaying_the_damaged_wal_really_loses_the_commits(tmp_path: Path) -> None:
    """Why the check exists: SQLite stops at the bad frame and says nothing."""
    db, wal = _crashed(tmp_path)
    damaged = bytearray(wal)
    damaged[100:200] = b"\xff" * 100
    Path(f"{db}-wal").write_bytes(bytes(damaged))
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 0
    conn.close()


def _header(page_size: int = 4096, pages: int = 10, trunk: int = 0, free: int = 0) -> bytes:
    head = bytearray(100)
    head[:16] = b"SQLite format 3\x00"
    head[16:24] = struct.pack(">HBBBBBB", page_size, 2, 2, 0, 64, 32, 32)
    head[24:40] = struct.pack(">IIII", 7, pages, trunk, free)
    head[92:96] = struct.pack(">I", 7)
    return bytes(head)


@pytest.mark.parametrize(
    ("head", "size", "said"),
    [
        (_header(), 40960, None),
        (_header(), 20480, "truncated"),
        (_header(), 40000, "whole number"),
        (_header(page_size=1000), 40000, "page size"),
        (_header(trunk=99), 40960, "free-page list"),
        (_header(free=11), 40960, "free-page list"),
        (_header()[:50], 50, "shorter than its header"),
        (b"not sqlite", 10, None),
    ],
)
def test_header_problems(head: bytes, size: int, said: str | None) -> None:
    found = header_problem(head, size)
    assert (found is None) if said is None else (found is not None and said in found)


def test_check_file_refuses_zero_bytes_and_leaves_nothing_beside(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    db.write_bytes(b"")
    with pytest.raises(StoreError, match="0 bytes"):
        check_file(db)
    assert [p.name for p in tmp_path.iterdir()] == ["state.db"]
    check_file(tmp_path / "missing.db")  # a new store is not damage


def test_check_file_passes_a_real_store(tmp_path: Path) -> None:
    db, _wal = _crashed(tmp_path)
    check_file(db)
    shutil.copy(db, tmp_path / "b.db")
    check_file(tmp_path / "b.db")


def test_a_wal_removed_while_being_looked_at_is_no_wal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process closing the last connection removes the -wal between our look and our
    read (seen in CI with six processes opening one new file): that is a clean store."""
    db, wal = _crashed(tmp_path)
    Path(f"{db}-wal").write_bytes(wal)
    real_read = Path.read_bytes

    def read_after_the_other_closed(self: Path) -> bytes:
        if self.name.endswith("-wal"):
            self.unlink()
        return real_read(self)

    monkeypatch.setattr(Path, "read_bytes", read_after_the_other_closed)
    check_wal(db)  # no "cannot read" StoreError
    assert not Path(f"{db}-wal").exists()
