"""Memories: durable notes about one user identity, kept across that user's sessions.

An identity is `<platform>:<user id>` (`owner_for`); the terminal has one local user, so every
terminal session on this machine shares `cli:local`. The agent's `memory` tool decides what to
save; its saves and deletions are applied in the turn's fenced write (`apply`), so a turn that
is retried after a crash does not save a note twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import Connection, delete, func, insert, select

from shared.db.schema import memories

MAX_NOTE_CHARS = 2_000
# The first half of the PostgreSQL advisory lock key a memory save takes (the owner's hash
# is the second): a constant of our own, so no other lock shares its keys.
MEMORY_LOCK_CLASS = 0x4D454D  # "MEM"
LOCAL_USER = "local"


@dataclass(frozen=True, slots=True)
class Note:
    id: int
    content: str
    created_at: float
    session_id: str | None = None


@dataclass(frozen=True, slots=True)
class MemoryOp:
    """A save (content) or a forget (note_id) the agent asked for during a turn."""

    action: str  # save | forget
    content: str | None = None
    note_id: int | None = None


def owner_for(platform: str, user_id: str | None, chat_id: str) -> str:
    """Whose memory a turn reads and writes: the sender, or the chat when there is no sender."""
    if user_id:
        return f"{platform}:{user_id}"
    return f"{platform}:chat:{chat_id}"


def clean_note(text: str) -> str:
    """One note: whitespace collapsed, at most MAX_NOTE_CHARS; ValueError if empty."""
    flat = " ".join(text.split())
    if not flat:
        raise ValueError("a memory note needs some text")
    if len(flat) > MAX_NOTE_CHARS:
        raise ValueError(f"a memory note is at most {MAX_NOTE_CHARS} characters, not {len(flat)}")
    return flat


def list_notes(conn: Connection, owner: str, limit: int = 50) -> list[Note]:
    """The owner's newest `limit` notes, oldest first."""
    rows = conn.execute(
        select(memories.c.id, memories.c.content, memories.c.created_at, memories.c.session_id)
        .where(memories.c.owner == owner)
        .order_by(memories.c.id.desc())
        .limit(limit)
    ).all()
    return [Note(int(r.id), str(r.content), float(r.created_at), r.session_id) for r in rows[::-1]]


def count_notes(conn: Connection, owner: str) -> int:
    query = select(func.count()).where(memories.c.owner == owner)
    return int(conn.execute(query).scalar_one())


def save_note(
    conn: Connection, owner: str, content: str, *, now: float, session_id: str | None = None
) -> int:
    """Save a note (an identical note already kept is not duplicated); returns its id."""
    text = clean_note(content)
    if conn.dialect.name == "postgresql":
        # One saver per owner at a time: two turns saving the same note at once would both
        # find it missing (SQLite's one writer orders them already).
        conn.execute(select(func.pg_advisory_xact_lock(MEMORY_LOCK_CLASS, func.hashtext(owner))))
    same = conn.execute(
        select(memories.c.id).where(memories.c.owner == owner, memories.c.content == text)
    ).scalar()
    if same is not None:
        return int(same)
    result = conn.execute(
        insert(memories).values(owner=owner, content=text, session_id=session_id, created_at=now)
    )
    key = result.inserted_primary_key
    assert key is not None
    return int(key[0])


def forget_note(conn: Connection, owner: str, note_id: int) -> bool:
    """Delete one of the owner's notes; False if it is not theirs or already gone."""
    result = conn.execute(
        delete(memories).where(memories.c.owner == owner, memories.c.id == note_id)
    )
    return result.rowcount > 0


def apply(
    conn: Connection,
    owner: str,
    ops: Iterable[MemoryOp],
    *,
    now: float,
    session_id: str | None = None,
) -> int:
    """Apply a turn's memory operations in order (inside its write); returns how many changed."""
    changed = 0
    for op in ops:
        if op.action == "save" and op.content:
            save_note(conn, owner, op.content, now=now, session_id=session_id)
            changed += 1
        elif op.action == "forget" and op.note_id is not None:
            changed += int(forget_note(conn, owner, op.note_id))
    return changed
