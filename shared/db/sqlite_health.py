"""Damage SQLite would not notice, or would make permanent, found before anything opens the file.

Three looks, cheapest first, none of which writes a byte or creates a -wal/-shm file:

- `check_file` on every open: a zero-byte file (SQLite would silently make it an empty
  store), and the 100-byte header: page size, the page count it records against the file's
  size (a truncated file), the free-page list inside the file.
- `wal_damage`, also on every open, when no other process has the database open (the next
  connection will replay the WAL): SQLite replays frame by frame and stops silently at the
  first frame whose checksum or salts do not match, treating everything after it as never
  written, and the next checkpoint makes that permanent. After a crash that is right (the
  last frame was being written); but if frames of the same generation follow the bad one,
  they were committed and would be lost.
- `quick_check` before the first write of a process, when the file is small enough for it
  to be cheap (it reads every page and cannot be interrupted: ~16 s at 1.8 GB).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import struct
from collections.abc import Iterator
from pathlib import Path

from shared.db.errors import StoreError

HEADER_BYTES = 100
# Before the first write a process runs `PRAGMA quick_check` on files up to this size. It
# reads every page and cannot be interrupted: 0.2 ms on a 0.5 MB store, 50-60 ms on a 68 MB
# one in the page cache (bench/db_health.py), but 16 s on a 1.8 GB store read cold; beyond
# the bound it is skipped (no claim either way) and `hermes db check` is the full look.
QUICK_CHECK_MAX_BYTES = 64 * 1024 * 1024
BACKUPS_DIR = "backups"

_WAL_HEADER = 32
_FRAME_HEADER = 24
_WAL_MAGIC_LE, _WAL_MAGIC_BE = 0x377F0682, 0x377F0683
# Every connection holds a shared lock on this byte of the -shm file (SQLite's "DMS" lock,
# 120 + 8 locks): an exclusive lock on it succeeds only when no process has the file open.
_SHM_DMS_BYTE = 128


def advice(path: Path) -> str:
    return f"run `hermes db check`; backups are in {path.parent / BACKUPS_DIR}"


def check_file(path: Path) -> None:
    """Refuse a file whose header or size says it is damaged; read-only, changes nothing."""
    try:
        size = path.stat().st_size
        if size == 0:
            raise StoreError(
                f"{path} is 0 bytes (an emptied or never-finished file); "
                "move it away to start afresh, or restore a backup"
            )
        with path.open("rb") as handle:
            head = handle.read(HEADER_BYTES)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc.strerror or exc}") from None
    problem = header_problem(head, size)
    if problem:
        raise StoreError(f"{path} is damaged ({problem}); {advice(path)}")


def header_problem(head: bytes, size: int) -> str | None:
    """What is wrong with a SQLite file's first 100 bytes, given its size; None if nothing."""
    if not head.startswith(b"SQLite format 3\x00"):
        return None  # not SQLite at all: the foreign-file check words that
    if len(head) < HEADER_BYTES:
        return f"only {size} bytes, shorter than its header"
    raw_page_size, write_v, read_v = struct.unpack(">HBB", head[16:20])
    page_size = 65536 if raw_page_size == 1 else raw_page_size
    if page_size < 512 or page_size & (page_size - 1):
        return f"page size {raw_page_size} in its header"
    if write_v not in (1, 2) or read_v not in (1, 2):
        return f"file format {write_v}/{read_v} in its header"
    if head[21:24] != b"\x40\x20\x20":
        return "payload fractions in its header"
    if size % page_size:
        return f"{size:,} bytes is not a whole number of {page_size}-byte pages"
    change, pages = struct.unpack(">II", head[24:32])
    trunk, free = struct.unpack(">II", head[32:40])
    (valid_for,) = struct.unpack(">I", head[92:96])
    if change == valid_for and pages:
        if size < pages * page_size:
            return f"truncated: {size // page_size:,} of {pages:,} pages"
        if trunk > pages or free > pages:
            return f"free-page list outside the file ({trunk}, {free} of {pages:,} pages)"
    return None


def _checksum(data: bytes, s0: int, s1: int, big: bool) -> tuple[int, int]:
    words = struct.unpack((">" if big else "<") + f"{len(data) // 4}I", data)
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & 0xFFFFFFFF
        s1 = (s1 + words[i + 1] + s0) & 0xFFFFFFFF
    return s0, s1


def wal_damage(data: bytes) -> str | None:
    """Why replaying this WAL would lose committed frames, or None if it would not."""
    if len(data) < _WAL_HEADER:
        return None  # empty or torn before any frame: nothing committed in it
    magic, _version, page_size, _seq, salt1, salt2, c1, c2 = struct.unpack(
        ">8I", data[:_WAL_HEADER]
    )
    if magic not in (_WAL_MAGIC_LE, _WAL_MAGIC_BE):
        return "its header is not a WAL header" if any(data[:_WAL_HEADER]) else None
    big = magic == _WAL_MAGIC_BE
    s0, s1 = _checksum(data[:24], 0, 0, big)
    if (s0, s1) != (c1, c2):
        return "its header checksum does not match"
    if page_size < 512 or page_size > 65536 or page_size & (page_size - 1):
        return f"page size {page_size} in its header"
    frame = _FRAME_HEADER + page_size
    bad: int | None = None
    following = 0
    for n in range((len(data) - _WAL_HEADER) // frame):
        at = _WAL_HEADER + n * frame
        head = data[at : at + _FRAME_HEADER]
        _page, _commit, fsalt1, fsalt2, f1, f2 = struct.unpack(">6I", head)
        if (fsalt1, fsalt2) != (salt1, salt2):
            if bad is None:
                break  # a frame of an earlier generation: this one's log ends here
            continue
        if bad is not None:
            following += 1
            continue
        t0, t1 = _checksum(head[:8], s0, s1, big)
        t0, t1 = _checksum(data[at + _FRAME_HEADER : at + frame], t0, t1, big)
        if (t0, t1) != (f1, f2):
            bad = n
            continue
        s0, s1 = t0, t1
    if bad is not None and following:
        frames = "frame follows" if following == 1 else "frames follow"
        return f"frame {bad + 1} is damaged and {following} committed {frames} it"
    return None


@contextlib.contextmanager
def _nobody_else(path: Path) -> Iterator[bool]:
    """Whether no other process has the database open, holding that true while inside.

    Holds an exclusive lock on the -shm's DMS byte, so a process opening the database
    meanwhile waits (busy) instead of replaying the WAL under our feet. POSIX locks belong to
    the process and closing any descriptor of the file drops them all, so the caller must not
    have the database open itself (`connect` keeps count)."""
    shm = Path(f"{path}-shm")
    try:
        fd = os.open(shm, os.O_RDWR)
    except FileNotFoundError:
        yield True  # no connection anywhere: SQLite creates it on opening
        return
    except OSError:
        yield True  # read-only: nothing can replay and write the WAL back here
        return
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, _SHM_DMS_BYTE)
        except OSError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.lockf(fd, fcntl.LOCK_UN, 1, _SHM_DMS_BYTE)
    finally:
        os.close(fd)


def check_wal(path: Path) -> None:
    """Refuse a WAL whose replay would drop committed frames (only when nobody has it open:
    otherwise it has been replayed already, and writers are appending to it)."""
    wal = Path(f"{path}-wal")
    if not wal.exists():
        return
    with _nobody_else(path) as alone:
        if not alone:
            return
        try:
            data = wal.read_bytes()
        except FileNotFoundError:
            return  # the last connection elsewhere closed meanwhile and removed it
        except OSError as exc:
            raise StoreError(f"cannot read {wal}: {exc.strerror or exc}") from None
        problem = wal_damage(data)
    if problem:
        raise StoreError(
            f"{wal} is damaged ({problem}); opening would lose them; copy state.db and its "
            f"-wal aside, then {advice(path)}"
        )


def check_on_open(path: Path, *, wal: bool = True) -> None:
    """The cheap checks every open runs (`wal` False when this process has it open already)."""
    check_file(path)
    if wal:
        check_wal(path)


def read_only_reason(path: Path) -> str | None:
    """Why state.db cannot be written here (a read-only file system or file), or None."""
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return "on a read-only file system"
    except OSError:
        return None
    if not os.access(path, os.W_OK):
        return "not writable by this user"
    return None


def quick_check(conn: sqlite3.Connection, path: Path, *, limit: int | None = None) -> str | None:
    """SQLite's quick_check on `conn` (a driver connection to `path`): 'ok', the first
    findings, or None when the file is bigger than `limit` (skipped: no claim either way)."""
    limit = QUICK_CHECK_MAX_BYTES if limit is None else limit
    try:
        if path.stat().st_size > limit:
            return None
    except OSError:
        return None
    try:
        rows = conn.execute("PRAGMA quick_check").fetchall()
    except sqlite3.DatabaseError as exc:
        return str(exc)
    return "; ".join(str(row[0]) for row in rows[:3])


def check_writable(conn: sqlite3.Connection, path: Path) -> None:
    """StoreError when state.db must not be written: read-only, or failing quick_check."""
    reason = read_only_reason(path)
    if reason:
        raise StoreError(f"{path} is read-only ({reason}); writes refused")
    finding = quick_check(conn, path)
    if finding not in (None, "ok"):
        raise StoreError(
            f"{path} is damaged ({_one_line(finding)}); writes refused — {advice(path)}"
        )


def _one_line(text: str | None, limit: int = 160) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
