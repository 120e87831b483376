"""Every write to a table goes through the module that owns it (issue 15): a statement that
inserts, updates or deletes rows of a table appears only in its owner's module."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OWNERS = {
    "sessions": "shared/store/sessions.py",
    "messages": "shared/store/messages.py",
    "routes": "shared/pipeline/routes.py",
    "inbox": "shared/pipeline/inbox.py",
    "outbox": "shared/pipeline/outbox.py",
    "leases": "shared/pipeline/leases.py",
    "cron_jobs": "shared/pipeline/cron.py",
    "usage_ledger": "shared/store/usage.py",
    "handoffs": "shared/store/handoffs.py",
}
# Appending a message bumps its session's counters in the same prepared batch: the hot path.
# A route's session columns (which session it points at) are route_sessions', its arrival
# counter and lease routes': one table, two owners of disjoint columns. The inbox's new rows are
# inbox_record's (recording), its rows' later states inbox's (claiming, finishing).
ALLOWED = {
    ("sessions", "shared/store/messages.py"),
    ("routes", "shared/pipeline/route_sessions.py"),
    ("inbox", "shared/pipeline/inbox_record.py"),
}
BUILDER = re.compile(r"\b(?:insert|update|delete)\((" + "|".join(OWNERS) + r")\)")
RAW = re.compile(r"\b(?:UPDATE|INSERT INTO|DELETE FROM) (" + "|".join(OWNERS) + r")\b")
# Triggers and migrations keep the search index and old files in step; they write no rows
# of their own accord.
NOT_CODE = (
    "shared/db/migrations/",
    "shared/search/sqlite/ddl.py",
    "shared/db/sqlite.py",
    "shared/db/postgresql.py",
)


def test_only_the_owner_writes_its_table() -> None:
    strays = []
    for folder in ("shared", "workers", "producers"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            where = path.relative_to(ROOT).as_posix()
            if where.startswith(NOT_CODE):
                continue
            text = path.read_text(encoding="utf-8")
            for match in [*BUILDER.finditer(text), *RAW.finditer(text)]:
                table = match.group(1)
                if where != OWNERS[table] and (table, where) not in ALLOWED:
                    line = text.count("\n", 0, match.start()) + 1
                    strays.append(f"{where}:{line} writes {table} (owner: {OWNERS[table]})")
    assert strays == []
