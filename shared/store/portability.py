"""Sessions as JSON lines: export each session with its messages, import such lines back.

One line is one session: every column of `sessions` plus `messages`, a list of message
objects (every column of `messages` but `session_id`; `tool_calls` decoded when it is JSON).
Import is idempotent by session id, checks every value against the schema, and writes each
line atomically (a savepoint per line inside short batch transactions). Message ids in a
file are never reused; the store numbers the messages afresh, in file order.

A session that holds media carries it in `media`: one object per blob (`sha256`, `media_type`,
`size`, `name`, `data` in base64). Import checks each blob's bytes against its sha256 and stores
it once, however many sessions or imports carry it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from sqlalchemy import Column, Connection, Float, Integer, Row, exc, func, select

from shared.db.engine import Store
from shared.db.errors import TitleInUse
from shared.db.schema import messages, sessions
from shared.ids import is_safe_session_id
from shared.media_objects import MediaObjects
from shared.store import media as media_rows
from shared.store import messages as message_rows
from shared.store import sessions as session_rows
from shared.store.sessions import title_holder
from shared.titles import TitleError, TitleSource, validate_title

SESSION_COLUMNS: tuple[str, ...] = tuple(column.name for column in sessions.columns)
# Every message column a line carries (`id` is exported for reference, never imported).
MESSAGE_COLUMNS: tuple[str, ...] = tuple(
    column.name for column in messages.columns if column.name != "session_id"
)
MESSAGE_FIELDS: tuple[str, ...] = tuple(name for name in MESSAGE_COLUMNS if name != "id")
REQUIRED = ("id", "source", "started_at", "messages")
# Kept by triggers as messages go in: a file's value is never trusted.
DERIVED = frozenset({"message_count"})
# Filled in after the messages are read when a line leaves them out.
DEFAULTED = frozenset({"last_active_at"})
EXPORT_PAGE = 200
IMPORT_BATCH_LINES = 100
IMPORT_BATCH_MESSAGES = 5_000
LINK_BATCH = 500
INT64 = 2**63
TOKEN_COLUMNS = ("input_tokens", "output_tokens")


# --- export ---


def _filters(source: str | None, session_id: str | None) -> list[Any]:
    where: list[Any] = []
    if source:
        where.append(sessions.c.source == source)
    if session_id:
        where.append(sessions.c.id == session_id)
    return where


def count_exportable(
    conn: Connection, *, source: str | None = None, session_id: str | None = None
) -> int:
    query = select(func.count()).select_from(sessions).where(*_filters(source, session_id))
    return int(conn.execute(query).scalar_one())


def export_sessions(
    conn: Connection,
    *,
    source: str | None = None,
    session_id: str | None = None,
    page: int = EXPORT_PAGE,
    objects: MediaObjects | None = None,
) -> Iterator[dict[str, Any]]:
    """Session documents in id order, a page of sessions and one session's messages at a time;
    media bytes that live in an object store are fetched from `objects`."""
    where = _filters(source, session_id)
    after: str | None = None
    while True:
        query = select(sessions).where(*where).order_by(sessions.c.id).limit(page)
        if after is not None:
            query = query.where(sessions.c.id > after)
        rows = conn.execute(query).all()
        for row in rows:
            yield session_document(conn, row, objects)
        if len(rows) < page:
            return
        after = rows[-1].id


def session_document(
    conn: Connection, row: Row[Any], objects: MediaObjects | None = None
) -> dict[str, Any]:
    data = row._mapping
    doc: dict[str, Any] = {name: data[name] for name in SESSION_COLUMNS}
    found = conn.execute(
        select(messages).where(messages.c.session_id == data["id"]).order_by(messages.c.id)
    )
    doc["messages"] = [message_document(message) for message in found]
    held = media_rows.export_documents(conn, data["id"], objects)
    if held:
        doc["media"] = held
    return doc


def message_document(row: Row[Any]) -> dict[str, Any]:
    data = row._mapping
    doc: dict[str, Any] = {name: data[name] for name in MESSAGE_COLUMNS}
    doc["tool_calls"] = decode_tool_calls(doc["tool_calls"])
    return doc


def decode_tool_calls(stored: str | None) -> Any:
    """Stored JSON text as a list/object; anything else (None, non-JSON) exactly as stored."""
    if stored is None:
        return None
    try:
        value = json.loads(stored)
    except ValueError:
        return stored
    return value if isinstance(value, list | dict) else stored


def encode_line(doc: dict[str, Any]) -> str:
    """One JSONL line (without the newline): UTF-8 text kept as is, compact."""
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


# --- import: checking one line ---


class BadLine(ValueError):
    """A line that cannot be imported; the message says why, in one line."""


@dataclass(frozen=True, slots=True)
class ParsedSession:
    values: dict[str, Any]
    parent_id: str | None
    messages: list[dict[str, Any]]
    media: list[media_rows.ImportedBlob] = field(default_factory=list)

    @property
    def id(self) -> str:
        return str(self.values["id"])


def _check_value(column: Column[Any], value: Any, where: str) -> Any:
    """`value` if it fits `column`'s type (None passes; nullability is checked by callers)."""
    if value is None:
        return None
    if isinstance(column.type, Integer):
        if isinstance(value, bool) or not isinstance(value, int) or not -INT64 <= value < INT64:
            raise BadLine(f"{where} must be an integer")
        return value
    if isinstance(column.type, Float):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise BadLine(f"{where} must be a number")
        try:
            number = float(value)  # an integer like 10**400 has no float
        except OverflowError:
            raise BadLine(f"{where} must be a finite number") from None
        if not math.isfinite(number):
            raise BadLine(f"{where} must be a finite number")
        return number
    if not isinstance(value, str):
        raise BadLine(f"{where} must be a string")
    return _utf8(value, where)


def _utf8(value: str, where: str) -> str:
    """`value` if the database can store it: JSON's \\ud800 escapes decode to lone surrogates,
    which are no text and make the driver fail at insert time. A NUL, which SQLite keeps and
    PostgreSQL cannot, becomes U+FFFD (shared.surrogates' rule for text from outside), so an
    export imports the same into either."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise BadLine(
            f"{where} is not valid Unicode text (lone surrogate at character {error.start + 1})"
        ) from None
    return value.replace("\x00", "\ufffd") if "\x00" in value else value


def _encode_tool_calls(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return _utf8(value, where)
    if isinstance(value, list | dict):
        return _utf8(json.dumps(value, ensure_ascii=False, separators=(",", ":")), where)
    raise BadLine(f"{where} must be a list, an object, a string or null")


def _decode(raw: bytes | str) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as error:
        raise BadLine(f"not UTF-8 text (byte {error.start + 1})") from None
    text = text.removeprefix("\ufeff")  # a byte-order mark, as editors on Windows write
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as error:
        raise BadLine(f"invalid JSON: {error.msg} at column {error.colno}") from None
    except RecursionError:
        raise BadLine("invalid JSON: nested too deeply") from None
    if not isinstance(doc, dict):
        raise BadLine("expected a JSON object (one session per line)")
    return doc


def _session_values(doc: dict[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name in SESSION_COLUMNS:
        if name in DERIVED or name not in doc:
            continue
        column = sessions.c[name]
        value = _check_value(column, doc[name], name)
        if value is None and not column.nullable:
            if column.server_default is None and name not in DEFAULTED:
                raise BadLine(f"{name} cannot be null")
            continue  # the column's default applies
        values[name] = value
    for name in ("id", "source"):
        if not values[name].strip():
            raise BadLine(f"{name} cannot be empty")
    for name in ("id", "parent_session_id"):
        if values.get(name) is not None and not is_safe_session_id(values[name]):
            raise BadLine(
                f"{name} {values[name][:80]!r} is not a session id (letters, digits and _.:@+- "
                "only, up to 128, no '..')"
            )
    for name in TOKEN_COLUMNS:
        if values.get(name, 0) < 0:
            raise BadLine(f"{name} cannot be negative")
    ended = values.get("ended_at")
    if ended is not None and ended < values["started_at"]:
        raise BadLine("ended_at cannot be before started_at")
    return values


def _check_title(values: dict[str, Any]) -> None:
    title = values.get("title")
    if title is not None:
        try:
            values["title"] = validate_title(title)
        except TitleError as error:
            raise BadLine(f"bad title: {error}") from None
    label = values.get("title_source")
    if label is not None and label not in {source.label for source in TitleSource}:
        known = ", ".join(source.label for source in TitleSource)
        raise BadLine(f"title_source must be one of {known}")
    if values.get("title") is not None and label is None:
        values["title_source"] = TitleSource.USER.label  # a title someone chose and kept


def _message_rows(value: Any, started_at: float) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise BadLine("messages must be a list")
    rows: list[dict[str, Any]] = []
    previous = started_at
    for number, item in enumerate(value, 1):
        where = f"message {number}"
        if not isinstance(item, dict):
            raise BadLine(f"{where} must be an object")
        row: dict[str, Any] = dict.fromkeys(MESSAGE_FIELDS)
        for name in MESSAGE_FIELDS:
            if name == "tool_calls":
                row[name] = _encode_tool_calls(item.get(name), f"{where}: tool_calls")
            elif name in item:
                row[name] = _check_value(messages.c[name], item[name], f"{where}: {name}")
        if not row["role"]:
            raise BadLine(f"{where} needs a role")
        if row["token_count"] is not None and row["token_count"] < 0:
            raise BadLine(f"{where}: token_count cannot be negative")
        if row["timestamp"] is None:
            row["timestamp"] = previous
        previous = row["timestamp"]
        rows.append(row)
    return rows


def parse_line(raw: bytes | str) -> ParsedSession:
    """Check one line against the schema; BadLine says what is wrong. Writes nothing."""
    return parse_document(_decode(raw))


def parse_document(doc: dict[str, Any]) -> ParsedSession:
    """Check one session document (a decoded line) against the schema. Writes nothing."""
    missing = [name for name in REQUIRED if doc.get(name) is None]
    if missing:
        raise BadLine("missing required field: " + ", ".join(missing))
    values = _session_values(doc)
    _check_title(values)
    rows = _message_rows(doc["messages"], values["started_at"])
    if values.get("last_active_at") is None:
        values["last_active_at"] = rows[-1]["timestamp"] if rows else values["started_at"]
    parent = values.pop("parent_session_id", None)
    try:
        blobs = media_rows.parse_documents(doc.get("media"), "media")
    except ValueError as error:
        raise BadLine(str(error).removeprefix("media: ")) from None
    return ParsedSession(values, parent if parent != values["id"] else None, rows, blobs)


# --- import: writing ---


def session_exists(conn: Connection, session_id: str) -> bool:
    found = conn.execute(select(sessions.c.id).where(sessions.c.id == session_id)).first()
    return found is not None


def _differs(conn: Connection, parsed: ParsedSession) -> bool:
    """Whether the stored session of `parsed.id` is another conversation than the line's."""
    started = conn.execute(
        select(sessions.c.started_at).where(sessions.c.id == parsed.id)
    ).scalar_one()
    count = conn.execute(
        select(func.count()).select_from(messages).where(messages.c.session_id == parsed.id)
    ).scalar_one()
    return bool(started != parsed.values["started_at"] or count != len(parsed.messages))


def write_session(
    conn: Connection, parsed: ParsedSession, objects: MediaObjects | None = None
) -> int | None:
    """Insert one session (parent unset) and its messages; None if its id is already present."""
    if session_exists(conn, parsed.id):
        return None
    title = parsed.values.get("title")
    if title is not None:
        holder = title_holder(conn, title)
        if holder is not None:
            raise BadLine(str(TitleInUse(title, holder)))
    session_rows.insert_imported(conn, parsed.values)
    message_rows.insert_imported(conn, parsed.id, parsed.messages)
    media_rows.import_blobs(conn, parsed.id, parsed.media, objects)
    return len(parsed.messages)


@dataclass
class ImportReport:
    imported: int = 0
    messages: int = 0
    skipped: int = 0
    bad: list[tuple[int, str]] = field(default_factory=list)
    parents_linked: int = 0
    parents_dropped: int = 0
    written: list[str] = field(default_factory=list)  # ids imported now
    present: list[str] = field(default_factory=list)  # ids skipped: already in the store
    # (line, id) of skipped sessions whose stored copy differs (start or message count)
    differing: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class _Importer:
    store: Store
    objects: MediaObjects | None = None
    report: ImportReport = field(default_factory=ImportReport)
    batch: list[tuple[int, ParsedSession]] = field(default_factory=list)
    weight: int = 0
    parents: dict[str, str] = field(default_factory=dict)

    def feed(self, number: int, raw: bytes | str) -> None:
        if not raw.strip():
            return
        self.feed_with(number, partial(parse_line, raw))

    def feed_with(self, number: int, parse: Callable[[], ParsedSession]) -> None:
        try:
            parsed = parse()
        except BadLine as error:
            self.report.bad.append((number, str(error)))
            return
        self.batch.append((number, parsed))
        # a blob weighs as a message per 16 KiB: a batch of large media stays small in memory
        self.weight += 1 + len(parsed.messages) + sum(len(b.data) for b in parsed.media) // 16384
        if len(self.batch) >= IMPORT_BATCH_LINES or self.weight >= IMPORT_BATCH_MESSAGES:
            self.flush()

    def flush(self) -> None:
        if not self.batch:
            return
        with self.store.write() as conn:
            for number, parsed in self.batch:
                self._write_one(conn, number, parsed)
        self.batch, self.weight = [], 0

    def _write_one(self, conn: Connection, number: int, parsed: ParsedSession) -> None:
        try:
            with conn.begin_nested():
                written = write_session(conn, parsed, self.objects)
        except BadLine as error:
            self.report.bad.append((number, str(error)))
            return
        except exc.StatementError as error:
            # IntegrityError, DataError, a value the driver cannot bind…: this line only (its
            # savepoint is rolled back); the rest of the batch stands.
            self.report.bad.append((number, f"rejected by the database: {error.orig}"))
            return
        except UnicodeEncodeError as error:  # the driver's own, unwrapped: text it cannot bind
            self.report.bad.append((number, f"rejected by the database: {error.reason}"))
            return
        if written is None:
            self.report.skipped += 1
            self.report.present.append(parsed.id)
            if _differs(conn, parsed):
                self.report.differing.append((number, parsed.id))
            else:  # the same session: media a partial earlier import missed goes in now
                media_rows.import_blobs(conn, parsed.id, parsed.media, self.objects)
            return
        self.report.imported += 1
        self.report.messages += written
        self.report.written.append(parsed.id)
        if parsed.parent_id is not None:
            self.parents[parsed.id] = parsed.parent_id

    def link_parents(self) -> None:
        """Second pass: keep a parent link only when that parent is in the store now."""
        pending = list(self.parents.items())
        for start in range(0, len(pending), LINK_BATCH):
            with self.store.write() as conn:
                for child, parent in pending[start : start + LINK_BATCH]:
                    if session_exists(conn, parent):
                        session_rows.link_parent(conn, child, parent)
                        self.report.parents_linked += 1
                    else:
                        self.report.parents_dropped += 1


def import_lines(
    store: Store,
    lines: Iterable[tuple[int, bytes | str]],
    *,
    progress: Callable[[int], None] | None = None,
    objects: MediaObjects | None = None,
) -> ImportReport:
    """Import numbered lines; `progress` hears each line's length once it has been read. Media
    bytes go to `objects` when given (MediaStorageError stops the import: the batch being
    written is rolled back, those before it stay)."""
    importer = _Importer(store, objects)
    for number, raw in lines:
        importer.feed(number, raw)
        if progress is not None:
            progress(len(raw))
    importer.flush()
    importer.link_parents()
    importer.report.bad.sort()
    return importer.report


def import_documents(
    store: Store,
    documents: Iterable[tuple[int, dict[str, Any]]],
    objects: MediaObjects | None = None,
) -> ImportReport:
    """Import numbered session documents (decoded lines, or what a reader of another format
    built) through the same checks and writes as `import_lines`."""
    importer = _Importer(store, objects)
    for number, doc in documents:
        importer.feed_with(number, partial(parse_document, doc))
    importer.flush()
    importer.link_parents()
    importer.report.bad.sort()
    return importer.report


def stored_message_counts(conn: Connection, session_ids: Iterable[str]) -> dict[str, int]:
    """How many messages each present session has in the store (COUNT of its rows, not the
    trigger-kept counter): what an import verifies against its source. Absent ids are left out.
    """
    wanted = list(dict.fromkeys(session_ids))
    counts: dict[str, int] = {}
    for start in range(0, len(wanted), LINK_BATCH):
        chunk = wanted[start : start + LINK_BATCH]
        present = conn.execute(select(sessions.c.id).where(sessions.c.id.in_(chunk))).scalars()
        counts.update(dict.fromkeys(present, 0))
        rows = conn.execute(
            select(messages.c.session_id, func.count())
            .where(messages.c.session_id.in_(chunk))
            .group_by(messages.c.session_id)
        ).all()
        counts.update({str(session_id): int(count) for session_id, count in rows})
    return counts
