"""state_meta: small named values every process shares (watermarks, last-run times)."""

from __future__ import annotations

from sqlalchemy import Connection, insert, select, update

from shared.db.schema import state_meta


def get_meta(conn: Connection, key: str) -> str | None:
    value = conn.execute(select(state_meta.c.value).where(state_meta.c.key == key)).scalar()
    return str(value) if value is not None else None


def set_meta(conn: Connection, key: str, value: str) -> None:
    done = conn.execute(update(state_meta).where(state_meta.c.key == key).values(value=value))
    if done.rowcount == 0:
        conn.execute(insert(state_meta).values(key=key, value=value))
