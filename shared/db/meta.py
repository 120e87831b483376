"""state_meta: small named values every process shares (watermarks, last-run times)."""

from __future__ import annotations

from sqlalchemy import Connection, insert, select, update

from shared.db.conflict import InsertOrSkip
from shared.db.schema import state_meta


def get_meta(conn: Connection, key: str) -> str | None:
    value = conn.execute(select(state_meta.c.value).where(state_meta.c.key == key)).scalar()
    return str(value) if value is not None else None


def set_meta(conn: Connection, key: str, value: str) -> None:
    done = conn.execute(update(state_meta).where(state_meta.c.key == key).values(value=value))
    if done.rowcount == 0:
        conn.execute(insert(state_meta).values(key=key, value=value))


_FIRST_VALUE = InsertOrSkip(state_meta, ("key", "value"), keys=("key",))


def meta_once(conn: Connection, key: str, value: str) -> str:
    """The value stored under `key`, storing `value` there first when there is none (the
    first writer wins on both databases; every other one reads the winner's value)."""
    _FIRST_VALUE.rowcount(conn, {"key": key, "value": value})
    stored = get_meta(conn, key)
    assert stored is not None  # inserted just now or by the writer that won
    return stored
