"""Fuzzing `sessions import` lines (issue 21): an export line mutated in type and value sits
between two good lines. Property: the import never raises, every line is accounted for once
(imported, already present, or bad with a reason), the good lines are always imported, and a
bad line stores nothing.

`pytest --fuzz-long` runs 20× the examples.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from shared.db import Store
from shared.db.schema import sessions
from shared.ids import is_safe_session_id
from shared.store.portability import import_lines
from tests.fuzzing import examples, mutated

NOW = 1_750_000_000.0
EXPORT_LINE = {
    "id": "20250601_090000_a0a0a0",
    "source": "telegram",
    "user_id": "111",
    "title": "Deploy notes",
    "started_at": NOW,
    "ended_at": NOW + 60,
    "end_reason": "idle",
    "parent_session_id": None,
    "input_tokens": 10,
    "output_tokens": 20,
    "messages": [
        {"role": "user", "content": "how do I deploy", "timestamp": NOW + 1, "token_count": 4},
        {
            "role": "assistant",
            "content": None,
            "timestamp": NOW + 2,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "x"}}],
        },
        {"role": "tool", "content": "{}", "timestamp": NOW + 3, "tool_call_id": "c1"},
    ],
}


def good(session_id: str) -> str:
    doc = {"id": session_id, "source": "cli", "started_at": NOW, "messages": []}
    return json.dumps(doc)


def ids(store: Store) -> set[str]:
    with store.read() as conn:
        return set(conn.execute(select(sessions.c.id)).scalars())


@settings(
    max_examples=examples(1000),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(doc=mutated(EXPORT_LINE), tail=st.sampled_from(["", "\n", "garbage{"]))
def test_an_import_accounts_for_every_line_and_keeps_the_good_ones(
    store: Store, doc: Any, tail: str
) -> None:
    run = uuid.uuid4().hex  # whole: 20,000 examples (--fuzz-long) collide on a 6-digit prefix
    before, after = f"before-{run}", f"after-{run}"
    if isinstance(doc, dict) and isinstance(doc.get("id"), str):
        doc["id"] = f"{doc['id']}-{run}"  # a fresh id per example: the store is shared
    hostile = json.dumps(doc) + tail
    known = ids(store)
    report = import_lines(store, enumerate([good(before), hostile, good(after)], 1))
    assert report.imported + report.skipped + len(report.bad) == 3
    assert {before, after} <= set(report.written)
    new = ids(store) - known
    assert new == set(report.written)
    assert all(is_safe_session_id(session_id) for session_id in new)
    if report.bad:
        assert [number for number, _ in report.bad] == [2]
        assert all(reason.strip() and "\n" not in reason for _, reason in report.bad)
