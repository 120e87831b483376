"""Platform cursors: where a polling receiver resumes (owner of the `platform_cursors` table).

One row per (platform, account): Matrix keeps its sync `next_batch` here, keyed by the bot's
user id; Teams keeps each conversation's Bot Connector service URL (account
`service_url:<chat id>`, see shared/platforms/teams.py). `save` is an upsert that loses no race:
update, else insert-or-skip, else (another writer inserted first) update again.
"""

from __future__ import annotations

import time

from sqlalchemy import Connection, bindparam, select, update

from shared.db.conflict import InsertOrSkip
from shared.db.prepared import Prepared
from shared.db.schema import platform_cursors as table

_INSERT = InsertOrSkip(
    table, ("platform", "account", "cursor", "updated_at"), keys=("platform", "account")
)
# Built and compiled once: Teams saves a conversation's service URL with its first turn (and
# whenever this process has forgotten it), where a Core UPDATE built per call cost more than
# the rest of the write.
_UPDATE = Prepared(
    update(table)
    .where(table.c.platform == bindparam("b_platform"), table.c.account == bindparam("b_account"))
    .values(cursor=bindparam("b_cursor"), updated_at=bindparam("b_at"))
)


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
    values = {"b_platform": platform, "b_account": account, "b_cursor": cursor, "b_at": at}
    if _UPDATE.rowcount(conn, values) == 0:
        row = {"platform": platform, "account": account, "cursor": cursor, "updated_at": at}
        if _INSERT.rowcount(conn, row) == 0:
            _UPDATE.rowcount(conn, values)
