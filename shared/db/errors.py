"""Errors the store raises; each message is one line an operator can act on."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy import exc as sa_exc


class StoreError(RuntimeError):
    """state.db cannot be used: corrupt, not ours, too new, or not writable."""


class SessionNotFound(LookupError):
    def __init__(self, ref: str) -> None:
        super().__init__(f"Session '{ref}' not found.")
        self.ref = ref


class AmbiguousSession(LookupError):
    def __init__(self, ref: str, candidates: Sequence[str], more: int = 0) -> None:
        listed = ", ".join(candidates) + (f" (+{more} more)" if more else "")
        super().__init__(
            f"'{ref}' matches {len(candidates) + more} sessions: {listed}. Use more of the id."
        )
        self.ref = ref
        self.candidates = tuple(candidates)


class TitleInUse(ValueError):
    def __init__(self, title: str, holder: str) -> None:
        super().__init__(f"Title '{title}' is already used by session {holder}.")
        self.title = title
        self.holder = holder


def is_transient(error: BaseException) -> bool:
    """Whether trying the same write again later can succeed: the database busy, gone or full.

    Anything else (a value the database refuses, a bug) fails the same way every time, so a
    caller that would retry forever (a long-polling receiver) must skip it instead.
    """
    return isinstance(
        error, sa_exc.OperationalError | sa_exc.InterfaceError | sa_exc.TimeoutError | OSError
    ) or (isinstance(error, sa_exc.DBAPIError) and error.connection_invalidated)


DISK_FULL_BYTES = 1024 * 1024  # less free than this, and a failed write failed for space


def plainly(cause: BaseException | str, path: Path | None) -> str:
    """The driver's words, except that an I/O error on a full disk is called that: SQLite
    reports a write that found no space (the WAL's, or its index's) as 'disk I/O error'."""
    said = str(cause)
    if path is None or "disk" not in said:
        return said
    try:
        free = shutil.disk_usage(path.parent).free
    except OSError:
        return said
    if free < DISK_FULL_BYTES:
        return f"the disk holding {path.parent} is full ({free:,} bytes free)"
    return said
