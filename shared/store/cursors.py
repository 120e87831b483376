"""Platform cursors: where a polling receiver resumes (owner of the `platform_cursors` table).

One row per (platform, account): Matrix keeps its sync `next_batch` here, keyed by the bot's
user id. `save` is an upsert (read then insert or update inside one write transaction: the
store serialises writers on SQLite, and a lost race on PostgreSQL raises, so the caller's next
save simply writes again).
"""

from __future__ import annotations

import time

from sqlalchemy import Connection, insert, select, update

from shared.db.schema import platform_cursors as table


def load(conn: Connection, platform: str, account: str) -> str | None:
    """The stored cursor, or None when this account has never synced."""
    found = conn.execute(
        select(table.c.cursor).where(table.c.platform == platform, table.c.account == account)
    ).scalar_one_or_none()
    return None if found is None else str(found)


def save(
    conn: Connection, platform: str, account: str, cursor: str, now: float | None = None
) -> None:
    """Store `cursor` for (platform, account), replacing the one before."""
    at = time.time() if now is None else now
    where = (table.c.platform == platform, table.c.account == account)
    changed = conn.execute(update(table).where(*where).values(cursor=cursor, updated_at=at))
    if changed.rowcount == 0:
        conn.execute(
            insert(table).values(platform=platform, account=account, cursor=cursor, updated_at=at)
        )
