"""Session rows: create, find, title, end, delete, prune (listing, counts and stats:
`shared.store.session_listing`; resolving a user's argument and lineages:
`shared.store.lineage`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy import (
    Connection,
    Text,
    and_,
    bindparam,
    delete,
    exists,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import IntegrityError

from shared.db.errors import SessionNotFound, TitleInUse
from shared.db.prepared import Prepared
from shared.db.schema import sessions
from shared.model import SessionRecord
from shared.pipeline import route_sessions
from shared.store import media
from shared.store import messages as message_rows
from shared.titles import TitleSource, validate_title

COMPRESSION = "compression"  # the end reason of a session continued in a compressed child

RECORD_COLUMNS = tuple(sessions.c[f.name] for f in fields(SessionRecord))


def create_session(
    conn: Connection,
    *,
    session_id: str,
    source: str,
    now: float,
    title: str | None = None,
    title_source: TitleSource = TitleSource.USER,
    **columns: Any,
) -> SessionRecord:
    """Insert a session; a title is cleaned and must be free."""
    values: dict[str, Any] = {
        "id": session_id,
        "source": source,
        "started_at": now,
        "last_active_at": now,
        **columns,
    }
    if title is not None:
        clean = validate_title(title)
        _ensure_title_free(conn, clean, session_id)
        values.update(title=clean, title_source=title_source.label)

    def insert_row() -> None:
        if values.keys() <= _CREATE_COLUMNS:
            _CREATE.rowcount(conn, {**_CREATE_EMPTY, **values})
        else:
            conn.execute(insert(sessions), values)

    if title is None:
        insert_row()
    else:
        _taking_title(conn, values["title"], insert_row)
    return SessionRecord(**values)


# A new session sets these (the counters start at their defaults).
_CREATE_COLUMNS = frozenset(c.name for c in sessions.columns if c.server_default is None)
_CREATE_EMPTY = dict.fromkeys(_CREATE_COLUMNS)
_CREATE = Prepared(
    insert(sessions).values({name: bindparam(name) for name in sorted(_CREATE_COLUMNS)})
)


def _made_and_attached() -> Prepared:
    """PostgreSQL: `_CREATE` unless the id is taken (no row then), and `route_sessions.attach`
    of the key to the session once it was made, as one statement answering how many it made."""
    made = (
        pg_insert(sessions)
        .values({name: bindparam(name) for name in sorted(_CREATE_COLUMNS)})
        .on_conflict_do_nothing(index_elements=[sessions.c.id])
        .returning(sessions.c.id)
        .cte("made")
    )
    attached = route_sessions.attach_once(made)
    counted = select(select(func.count()).select_from(made).scalar_subquery().label("made"))
    return Prepared(counted.add_cte(made, attached), dialect="postgresql")


_MADE_AND_ATTACHED = _made_and_attached()


def create_attached(
    conn: Connection, *, session_id: str, source: str, now: float, key: str, **columns: Any
) -> SessionRecord | None:
    """PostgreSQL: `create_session` of an untitled session, and `route_sessions.attach` of
    `key` to it, in one statement; None when `session_id` is taken (nothing written then). The
    look for a free id (`session_exists`) is the insert itself."""
    values: dict[str, Any] = {
        "id": session_id,
        "source": source,
        "started_at": now,
        "last_active_at": now,
        **columns,
    }
    params = {**_CREATE_EMPTY, **values, "b_key": key, "b_session": session_id, "b_now": now}
    found = _MADE_AND_ATTACHED.first(conn, params)
    assert found is not None  # a SELECT of a count: always one row
    return SessionRecord(**values) if found["made"] else None


_GET = Prepared(select(sessions).where(sessions.c.id == bindparam("b_id")))


def get_session(conn: Connection, session_id: str) -> SessionRecord | None:
    row = _GET.first(conn, {"b_id": session_id})
    return SessionRecord.from_mapping(row) if row else None


_EXISTS = Prepared(select(sessions.c.id).where(sessions.c.id == bindparam("b_id")))


def session_exists(conn: Connection, session_id: str) -> bool:
    return _EXISTS.scalar(conn, {"b_id": session_id}) is not None


def require_session(conn: Connection, session_id: str) -> SessionRecord:
    record = get_session(conn, session_id)
    if record is None:
        raise SessionNotFound(session_id)
    return record


_TITLE_HOLDER = Prepared(
    select(sessions.c.id).where(
        sessions.c.title == bindparam("b_title"), sessions.c.id != bindparam("b_id")
    )
)
_SET_TITLE = Prepared(
    update(sessions)
    .where(sessions.c.id == bindparam("b_id"))
    .values(title=bindparam("b_title"), title_source=bindparam("b_source"))
)


def _untitled_titled() -> Prepared:
    """PostgreSQL: `_SET_TITLE` of a session that has no title, unless another session holds
    the title (`_TITLE_HOLDER`), as one statement answering whether it wrote and that holder."""
    holder = (
        select(sessions.c.id)
        .where(sessions.c.title == bindparam("b_title"), sessions.c.id != bindparam("b_id"))
        .limit(1)
        .cte("holder")
    )
    written = (
        update(sessions)
        .where(
            sessions.c.id == bindparam("b_id"),
            sessions.c.title.is_(None),
            ~exists(select(1).select_from(holder)),
        )
        .values(title=bindparam("b_title"), title_source=bindparam("b_source"))
        .returning(sessions.c.id)
        .cte("written")
    )
    answers = select(
        select(func.count()).select_from(written).scalar_subquery().label("written"),
        select(holder.c.id).scalar_subquery().label("holder"),
    )
    return Prepared(answers.add_cte(holder, written), dialect="postgresql")


_UNTITLED_TITLED = _untitled_titled()


def title_untitled(conn: Connection, session_id: str, title: str, source: TitleSource) -> bool:
    """PostgreSQL: give `session_id` the (valid) `title` if it has none yet: True when written,
    False when the session is gone or has a title. TitleInUse when another session holds it
    (also one that took it meanwhile: its unique index refuses ours, see `_taking_title`).
    One statement (in its savepoint) for `get_session`, `_ensure_title_free` and the write."""
    params = {"b_id": session_id, "b_title": title, "b_source": source.label}
    found: dict[str, Any] = {}

    def write() -> None:
        row = _UNTITLED_TITLED.first(conn, params)
        assert row is not None  # a SELECT of a count: always one row
        found.update(row)

    _taking_title(conn, title, write)
    if found["holder"] is not None:
        raise TitleInUse(title, found["holder"])
    return bool(found["written"])


def _ensure_title_free(conn: Connection, title: str, session_id: str) -> None:
    holder = _TITLE_HOLDER.scalar(conn, {"b_title": title, "b_id": session_id})
    if holder is not None:
        raise TitleInUse(title, holder)


def _taking_title(conn: Connection, title: str, write: Callable[[], None]) -> None:
    """Run `write`, which gives a session `title` after `_ensure_title_free` found it free.

    SQLite's one writer makes that look final. On PostgreSQL another transaction may take the
    title between the look and the write: its unique index then refuses ours (after waiting for
    the other to commit), which is the same TitleInUse the look would have raised."""
    if conn.dialect.name == "sqlite":
        write()
        return
    try:
        with conn.begin_nested():
            write()
    except IntegrityError as error:
        holder = title_holder(conn, title)
        if holder is None:
            raise  # not the title's index
        raise TitleInUse(title, holder) from error


def set_title(
    conn: Connection,
    session_id: str,
    title: str | None,
    source: TitleSource = TitleSource.USER,
) -> bool:
    """Set (or clear, with None) a title. False when a higher-ranked title is already there."""
    current = require_session(conn, session_id)
    held = TitleSource.from_label(current.title_source)
    if current.title is not None and held is not None and held > source:
        return False
    if title is None:
        _SET_TITLE.rowcount(conn, {"b_id": session_id, "b_title": None, "b_source": None})
        return True
    clean = validate_title(title)
    _ensure_title_free(conn, clean, session_id)
    params = {"b_id": session_id, "b_title": clean, "b_source": source.label}

    def write() -> None:
        _SET_TITLE.rowcount(conn, params)

    _taking_title(conn, clean, write)
    return True


def end_session(conn: Connection, session_id: str, reason: str, now: float) -> bool:
    """Mark a session ended (first end wins); False if it was already ended."""
    result = conn.execute(
        update(sessions)
        .where(sessions.c.id == session_id, sessions.c.ended_at.is_(None))
        .values(ended_at=now, end_reason=reason)
    )
    return result.rowcount > 0


def reopen_session(conn: Connection, session_id: str) -> bool:
    """Clear the end of a session ended by leaving the terminal, /new, /reset or a reset sweep
    (never a compressed one: its conversation goes on in the continuation)."""
    result = conn.execute(
        update(sessions)
        .where(
            sessions.c.id == session_id,
            sessions.c.ended_at.is_not(None),
            sessions.c.end_reason != COMPRESSION,
        )
        .values(ended_at=None, end_reason=None)
    )
    return result.rowcount > 0


def move_to_chat(conn: Connection, session_id: str, chat_id: str, session_key: str) -> None:
    """A session follows its chat to a new id (a Telegram group became a supergroup)."""
    conn.execute(
        update(sessions)
        .where(sessions.c.id == session_id)
        .values(chat_id=chat_id, session_key=session_key)
    )


def move_chat(conn: Connection, source: str, old: str, new: str) -> int:
    """Every other session of chat `old` on `source` now names chat `new`; how many."""
    result = conn.execute(
        update(sessions)
        .where(sessions.c.source == source, sessions.c.chat_id == old)
        .values(chat_id=new)
    )
    return int(result.rowcount)


def insert_imported(conn: Connection, values: dict[str, Any]) -> None:
    """A session row as an export line holds it (checked by the importer; parent set later)."""
    conn.execute(insert(sessions).values(**values))


def link_parent(conn: Connection, child: str, parent: str) -> None:
    """Give an imported session its parent, unless it has one already."""
    conn.execute(
        update(sessions)
        .where(sessions.c.id == child, sessions.c.parent_session_id.is_(None))
        .values(parent_session_id=parent)
    )


def delete_session(conn: Connection, session_id: str, dropped: list[str] | None = None) -> bool:
    """Delete a session, its messages and the media only it held; its continuations keep
    living, unparented. Blobs whose objects must go after the commit are added to `dropped`
    (media.forget)."""
    media.release(conn, [session_id], dropped)
    result = conn.execute(delete(sessions).where(sessions.c.id == session_id))
    return result.rowcount > 0


def prunable(
    conn: Connection, *, ended_before: float, source: str | None = None
) -> list[SessionRecord]:
    """Ended sessions whose end is older than the cutoff (live sessions are never pruned)."""
    query = select(sessions).where(
        and_(sessions.c.ended_at.is_not(None), sessions.c.ended_at < ended_before)
    )
    if source:
        query = query.where(sessions.c.source == source)
    return [SessionRecord.from_row(r) for r in conn.execute(query.order_by(sessions.c.ended_at))]


def delete_sessions(
    conn: Connection, session_ids: Sequence[str], dropped: list[str] | None = None
) -> int:
    if not session_ids:
        return 0
    media.release(conn, session_ids, dropped)
    result = conn.execute(delete(sessions).where(sessions.c.id.in_(list(session_ids))))
    return result.rowcount


# --- added for `hermes sessions` (title holder, batched prune) ---


def title_holder(conn: Connection, title: str) -> str | None:
    """The id of the session holding exactly `title`, if any."""
    holder = conn.execute(select(sessions.c.id).where(sessions.c.title == title).limit(1)).scalar()
    return str(holder) if holder is not None else None


@dataclass(frozen=True, slots=True)
class PruneSummary:
    sessions: int
    messages: int
    oldest_ended: float | None
    newest_ended: float | None
    sample_titles: list[str]


def _prunable_where(ended_before: float, source: str | None) -> list[Any]:
    where: list[Any] = [sessions.c.ended_at.is_not(None), sessions.c.ended_at < ended_before]
    if source:
        where.append(sessions.c.source == source)
    return where


def prune_summary(
    conn: Connection, *, ended_before: float, source: str | None = None, sample: int = 3
) -> PruneSummary:
    """What a prune would delete, aggregated in SQL: counts, end range and a few titles."""
    where = _prunable_where(ended_before, source)
    row = conn.execute(
        select(
            func.count(),
            func.coalesce(func.sum(sessions.c.message_count), 0),
            func.min(sessions.c.ended_at),
            func.max(sessions.c.ended_at),
        ).where(*where)
    ).one()
    titles = (
        conn.execute(
            select(sessions.c.title)
            .where(*where, sessions.c.title.is_not(None))
            .order_by(sessions.c.ended_at.desc())
            .limit(sample)
        )
        .scalars()
        .all()
    )
    return PruneSummary(
        sessions=int(row[0]),
        messages=int(row[1]),
        oldest_ended=row[2],
        newest_ended=row[3],
        sample_titles=[str(t) for t in titles],
    )


def prune_batch(
    conn: Connection,
    *,
    ended_before: float,
    source: str | None = None,
    limit: int = 500,
    max_messages: int | None = None,
    deleted: list[str] | None = None,
    dropped: list[str] | None = None,
) -> tuple[int, int]:
    """Delete up to `limit` of the oldest prunable sessions; (sessions, messages) deleted.

    `max_messages` also bounds the batch by the messages it takes with it, so one batch never
    holds the write lock for long: when the oldest prunable session alone has more, this batch
    deletes `max_messages` of its messages and leaves the session (and the rest) for the next
    one, returning (0, n). Call it inside one write transaction (BEGIN IMMEDIATE): the rows
    picked cannot change before they are deleted, and each batch re-reads the condition.
    Callers loop until it returns (0, 0). The ids of the sessions deleted are added to
    `deleted` when it is given; blobs whose objects must go after the commit to `dropped`.
    """
    where = _prunable_where(ended_before, source)
    picked = conn.execute(
        select(sessions.c.id, sessions.c.message_count)
        .where(*where)
        .order_by(sessions.c.ended_at)
        .limit(limit)
    ).all()
    chosen: list[str] = []
    taken = 0
    for row in picked:
        if max_messages is not None and taken + row.message_count > max_messages:
            if not chosen:
                return 0, message_rows.trim_oldest(conn, row.id, max_messages)
            break
        chosen.append(row.id)
        taken += int(row.message_count)
    if not chosen:
        return 0, 0
    media.release(conn, chosen, dropped)
    result = conn.execute(delete(sessions).where(sessions.c.id.in_(chosen)))
    if deleted is not None:
        deleted.extend(chosen)
    return result.rowcount, taken


# --- added for the agent (model snapshot) ---


def record_model(
    conn: Connection,
    session_id: str,
    *,
    model: str | None = None,
    model_config: str | None = None,
    system_prompt: str | None = None,
) -> None:
    """Snapshot what answered this session: model name, its config (JSON), the system prompt
    (a None leaves that one as it was)."""
    if model is None and model_config is None and system_prompt is None:
        return
    _RECORD_MODEL.rowcount(
        conn,
        {"b_id": session_id, "b_model": model, "b_config": model_config, "b_prompt": system_prompt},
    )


_RECORD_MODEL = Prepared(
    update(sessions)
    .where(sessions.c.id == bindparam("b_id"))
    .values(
        model=func.coalesce(bindparam("b_model", type_=Text), sessions.c.model),
        model_config=func.coalesce(bindparam("b_config", type_=Text), sessions.c.model_config),
        system_prompt=func.coalesce(bindparam("b_prompt", type_=Text), sessions.c.system_prompt),
    )
)
