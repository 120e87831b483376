"""Media blobs: attachments and derived media in the database (owner of `media_blobs` and
`media_refs`).

A blob is keyed by the sha256 of its bytes, so the same file sent twice is stored once. A
transcript names a blob as `blob:<sha256>` (with the file's name and media type beside it),
never as a path on one host: every host of a fleet reads the bytes from here. A reference row
ties a blob to each session that holds it; deleting or pruning sessions drops their references
and, in the same transaction, every blob that no session references any more.

An upload that no session has taken yet (the terminal stores a file's bytes before its turn
runs) has no reference; `sweep_unreferenced` removes such blobs once they are older than a
grace period, so a turn that never ran leaves nothing behind for long.

With `media.url` set, the functions that write or read bytes are given the object store
(shared.media_objects): a new blob's bytes are PUT there before its row is written (the row
then has empty `data` and the store's URL in `location`), and reads fetch them from there. The
functions that drop rows add the dropped digests to `dropped`; the caller deletes their objects
once the transaction has committed (`forget`), so a failure leaves an orphan object, never a
row without its bytes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, delete, exists, func, select

from shared.db.conflict import InsertOrSkip
from shared.db.schema import media_blobs as blobs
from shared.db.schema import media_refs as refs
from shared.media_objects import MediaStorageError

if TYPE_CHECKING:
    from shared.db.engine import Store
    from shared.media_objects import MediaObjects

_NEW_BLOB = InsertOrSkip(
    blobs, ["sha256", "data", "size", "media_type", "created_at", "location"], keys=["sha256"]
)
_NEW_REF = InsertOrSkip(
    refs, ["sha256", "session_id", "name", "created_at"], keys=["sha256", "session_id"]
)
PREFIX = "blob:"
DIGEST = re.compile(r"[0-9a-f]{64}")
DEFAULT_TYPE = "application/octet-stream"
# An upload no session took: kept this long for its turn to run, then swept.
UNREFERENCED_GRACE_SECONDS = 24 * 3600


class MediaRefused(ValueError):
    """A blob that must not be stored (too big, malformed); the message says why."""


@dataclass(frozen=True, slots=True)
class Blob:
    sha256: str
    data: bytes
    size: int
    media_type: str
    created_at: float

    @property
    def ref(self) -> str:
        return PREFIX + self.sha256


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def ref_of(sha256: str) -> str:
    return PREFIX + sha256


def parse_ref(value: str | None) -> str | None:
    """The digest named by `blob:<sha256>`, or None when `value` is not a blob reference."""
    if not value or not value.startswith(PREFIX):
        return None
    sha = value.removeprefix(PREFIX)
    return sha if DIGEST.fullmatch(sha) else None


def max_bytes_for(max_mb: float) -> int:
    """`agent.max_attachment_mb` in bytes."""
    return int(max_mb * 1024 * 1024)


def check_size(size: int, max_bytes: int, name: str = "the attachment") -> None:
    """MediaRefused when `size` is over the cap; nothing is stored then."""
    if size > max_bytes:
        raise MediaRefused(
            f"{name} is {size:,} bytes, over the {max_bytes:,}-byte limit "
            f"(agent.max_attachment_mb = {max_bytes / 1024 / 1024:g})"
        )


def put(
    conn: Connection,
    data: bytes,
    media_type: str | None,
    *,
    max_bytes: int,
    session_id: str | None = None,
    name: str | None = None,
    now: float | None = None,
    objects: MediaObjects | None = None,
) -> str:
    """Store `data` (once per content) and, given `session_id`, reference it from that session.
    Returns the digest. MediaRefused, with nothing written, when it is over `max_bytes`.

    Given `objects`, a new blob's bytes go there first (MediaStorageError, nothing written,
    when the store fails); the row written after it names the store."""
    check_size(len(data), max_bytes, name or "the attachment")
    at = time.time() if now is None else now
    sha = digest(data)
    held = conn.execute(select(blobs.c.sha256).where(blobs.c.sha256 == sha)).first()
    if held is None:  # two hosts storing the same bytes at once: the loser's insert is skipped
        kind = media_type or DEFAULT_TYPE
        values = {"sha256": sha, "data": data, "size": len(data), "created_at": at}
        if objects is not None:
            objects.put(sha, data, kind)  # raises before any row is written
            values.update(data=b"", location=objects.url)
        else:
            values["location"] = None
        _NEW_BLOB.rowcount(conn, {**values, "media_type": kind})
    if session_id is not None:
        add_ref(conn, sha, session_id, name=name, now=at)
    return sha


def add_ref(
    conn: Connection,
    sha256: str,
    session_id: str,
    *,
    name: str | None = None,
    now: float | None = None,
) -> bool:
    """Reference a stored blob from a session (a no-op when it already is); False when the
    blob is not stored."""
    if not exists_blob(conn, sha256):
        return False
    at = time.time() if now is None else now
    values = {"sha256": sha256, "session_id": session_id, "name": name, "created_at": at}
    _NEW_REF.rowcount(conn, values)
    return True


def exists_blob(conn: Connection, sha256: str) -> bool:
    return conn.execute(select(blobs.c.sha256).where(blobs.c.sha256 == sha256)).first() is not None


def _bytes_of(row: Any, objects: MediaObjects | None) -> bytes:
    """A blob row's bytes: from the row, or from the object store that holds them."""
    if row.location is None:
        return bytes(row.data)
    if objects is None:
        raise MediaStorageError(
            f"blob {row.sha256[:12]} is stored in {row.location}, but media.url is not set"
        )
    return objects.get(row.sha256)


def read(conn: Connection, sha256: str, objects: MediaObjects | None = None) -> Blob | None:
    """The blob, bytes included (fetched from `objects` when it holds them); None when no such
    blob is stored. MediaStorageError when its object store cannot give the bytes."""
    row = conn.execute(select(blobs).where(blobs.c.sha256 == sha256)).first()
    if row is None:
        return None
    data = _bytes_of(row, objects)
    return Blob(row.sha256, data, int(row.size), row.media_type, float(row.created_at))


def session_blobs(conn: Connection, session_id: str) -> list[str]:
    """The digests a session references, in a stable order."""
    query = select(refs.c.sha256).where(refs.c.session_id == session_id).order_by(refs.c.sha256)
    return [str(sha) for sha in conn.execute(query).scalars()]


def release(conn: Connection, session_ids: Sequence[str], dropped: list[str] | None = None) -> int:
    """Drop the sessions' references and every blob no session references any more (call it in
    the transaction that deletes the sessions). Returns how many blobs went; the digests of
    those whose bytes are in an object store are added to `dropped` (see `forget`)."""
    if not session_ids:
        return 0
    ids = list(session_ids)
    held = select(refs.c.sha256).where(refs.c.session_id.in_(ids)).distinct()
    candidates = [str(sha) for sha in conn.execute(held).scalars()]
    if not candidates:
        return 0
    conn.execute(delete(refs).where(refs.c.session_id.in_(ids)))
    still = exists().where(refs.c.sha256 == blobs.c.sha256)
    return _drop(conn, [blobs.c.sha256.in_(candidates), ~still], dropped)


def _drop(conn: Connection, where: list[Any], dropped: list[str] | None) -> int:
    """Delete the blob rows matching `where`; the digests of those held in an object store
    go to `dropped`. How many rows went."""
    gone = conn.execute(delete(blobs).where(*where).returning(blobs.c.sha256, blobs.c.location))
    rows = gone.all()
    if dropped is not None:
        dropped.extend(str(row.sha256) for row in rows if row.location is not None)
    return len(rows)


def forget(store: Store, objects: MediaObjects | None, dropped: Sequence[str]) -> list[str]:
    """After the commit that dropped their rows: delete those blobs' objects, but not one whose
    row another host has written again meanwhile (the same bytes sent anew). Returns the
    digests whose objects could not be deleted (orphans, for the sweep to find later)."""
    if objects is None or not dropped:
        return []
    with store.read() as conn:
        again = held_of(conn, dropped)
    return objects.delete(sha for sha in dropped if sha not in again)


def sweep_unreferenced(
    conn: Connection,
    *,
    older_than: float,
    limit: int = 500,
    dry_run: bool = False,
    dropped: list[str] | None = None,
) -> int:
    """Blobs no session references, stored before `older_than` (uploads whose turn never ran,
    references of sessions deleted by older code): removed, at most `limit` per call."""
    from shared.db.schema import sessions

    orphan_refs = select(refs.c.sha256, refs.c.session_id).where(
        refs.c.created_at < older_than,
        ~exists().where(sessions.c.id == refs.c.session_id),
    )
    stale = conn.execute(orphan_refs.limit(limit)).all()
    if stale and not dry_run:
        for sha, session_id in stale:
            conn.execute(delete(refs).where(refs.c.sha256 == sha, refs.c.session_id == session_id))
    unreferenced = (
        select(blobs.c.sha256)
        .where(blobs.c.created_at < older_than, ~exists().where(refs.c.sha256 == blobs.c.sha256))
        .limit(limit)
    )
    chosen = [str(sha) for sha in conn.execute(unreferenced).scalars()]
    if chosen and not dry_run:
        _drop(conn, [blobs.c.sha256.in_(chosen)], dropped)
    return len(chosen)


def held_of(conn: Connection, digests: Sequence[str]) -> set[str]:
    """Which of `digests` have a blob row."""
    if not digests:
        return set()
    query = select(blobs.c.sha256).where(blobs.c.sha256.in_(list(digests)))
    return {str(sha) for sha in conn.execute(query).scalars()}


@dataclass(frozen=True, slots=True)
class MediaStats:
    blobs: int
    bytes: int


def stats(conn: Connection) -> MediaStats:
    row = conn.execute(select(func.count(), func.coalesce(func.sum(blobs.c.size), 0))).one()
    return MediaStats(int(row[0]), int(row[1]))


# --- export / import: a session's blobs travel with it, base64 in the JSONL ---


def export_documents(
    conn: Connection, session_id: str, objects: MediaObjects | None = None
) -> list[dict[str, Any]]:
    """The session's blobs as JSON-ready documents (bytes base64-encoded, fetched from the
    object store for blobs it holds)."""
    query = (
        select(blobs, refs.c.name)
        .join(refs, refs.c.sha256 == blobs.c.sha256)
        .where(refs.c.session_id == session_id)
        .order_by(blobs.c.sha256)
    )
    return [
        {
            "sha256": row.sha256,
            "media_type": row.media_type,
            "size": int(row.size),
            "name": row.name,
            "data": base64.b64encode(_bytes_of(row, objects)).decode("ascii"),
        }
        for row in conn.execute(query)
    ]


@dataclass(frozen=True, slots=True)
class ImportedBlob:
    sha256: str
    data: bytes
    media_type: str
    name: str | None


def parse_documents(value: Any, where: str, *, max_bytes: int | None = None) -> list[ImportedBlob]:
    """An exported `media` list, checked: each blob's bytes must hash to its key. ValueError
    naming `where` and the fault otherwise."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{where}: 'media' must be a list")
    parsed: list[ImportedBlob] = []
    for index, doc in enumerate(value):
        at = f"{where}: media[{index}]"
        if not isinstance(doc, dict):
            raise ValueError(f"{at} must be an object")
        sha, data64 = doc.get("sha256"), doc.get("data")
        if not isinstance(sha, str) or not DIGEST.fullmatch(sha):
            raise ValueError(f"{at}: 'sha256' must be 64 lowercase hex digits")
        if not isinstance(data64, str):
            raise ValueError(f"{at}: 'data' must be base64 text")
        try:
            data = base64.b64decode(data64, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"{at}: 'data' is not valid base64") from None
        if digest(data) != sha:
            raise ValueError(f"{at}: the data does not match its sha256")
        if max_bytes is not None:
            try:
                check_size(len(data), max_bytes, f"{at}")
            except MediaRefused as exc:
                raise ValueError(str(exc)) from None
        media_type = doc.get("media_type")
        name = doc.get("name")
        parsed.append(
            ImportedBlob(
                sha,
                data,
                media_type if isinstance(media_type, str) and media_type else DEFAULT_TYPE,
                name if isinstance(name, str) else None,
            )
        )
    return parsed


def import_blobs(
    conn: Connection,
    session_id: str,
    items: Iterable[ImportedBlob],
    objects: MediaObjects | None = None,
) -> None:
    """Store imported blobs for a session (bytes into `objects` when given); a blob or
    reference already held is left as is."""
    for item in items:
        put(
            conn,
            item.data,
            item.media_type,
            max_bytes=len(item.data),
            session_id=session_id,
            name=item.name,
            objects=objects,
        )
