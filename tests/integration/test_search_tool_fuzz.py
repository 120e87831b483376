"""session_search never raises for anything the model sends (issue 21, item 13): the two
reported arguments, then a hypothesis property over every argument, on a real state.db."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.db import Store
from shared.search.request import ARGUMENTS
from shared.search.tool import run
from shared.store.messages import append_message
from shared.store.sessions import create_session
from tests.fuzzing import EXTREMES, VALUES, examples

pytestmark = pytest.mark.both_databases

SID = "20250101_000000_abcdef"


def seeded(store: Store) -> Store:
    with store.write() as conn:
        if conn.exec_driver_sql("SELECT count(*) FROM sessions").scalar_one() == 0:
            create_session(conn, session_id=SID, source="cli", now=1_700_000_000.0)
            for n, text in enumerate(["the blue door", "a red key", "东京 天气 sunny"]):
                append_message(conn, SID, ("user", "assistant")[n % 2], text, now=1.7e9 + n)
    return store


def answered(store: Store, args: Any) -> dict[str, Any]:
    result = run(store, args, None)
    json.dumps(result)  # plain JSON data, whatever came in
    return result


def test_a_message_id_beyond_64_bits_is_an_answer_not_an_exception(store: Store) -> None:
    result = answered(seeded(store), {"session_id": SID, "around_message_id": 2**70})
    assert "error" in result


def test_a_lone_surrogate_in_an_id_or_query_is_an_answer_not_an_exception(store: Store) -> None:
    seeded(store)
    assert "error" in answered(store, {"session_id": "\ud800"})
    assert "error" in answered(store, {"session_id": "\ud800", "around_message_id": 1})
    answered(store, {"query": "door \udfff"})


# Per argument, a plausible value or anything at all: a call that is valid but for one hostile
# value reaches the database, which is where the reported exceptions came from.
PLAUSIBLE = {
    "query": st.sampled_from(["door", "blue door", '"red key"', "东京", "do*"]),
    "session_id": st.sampled_from([SID, SID[:10]]),
    "around_message_id": st.integers(min_value=1, max_value=5),
    "window": st.integers(min_value=0, max_value=5),
    "limit": st.integers(min_value=1, max_value=10),
    "sort": st.sampled_from(["newest", "oldest"]),
    "role_filter": st.sampled_from(["user", "user,assistant", "tool"]),
    "source": st.sampled_from(["cli", "telegram"]),
}
assert set(PLAUSIBLE) == set(ARGUMENTS)
ARGS = st.fixed_dictionaries(
    {},
    optional={
        name: st.one_of(PLAUSIBLE[name], PLAUSIBLE[name], EXTREMES, VALUES)
        for name in sorted(ARGUMENTS)
    },
) | st.dictionaries(st.text(max_size=8), VALUES, max_size=3)


@settings(max_examples=examples(1000), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=st.one_of(ARGS, VALUES))
def test_any_arguments_get_an_answer(store: Store, args: Any) -> None:
    answered(seeded(store), args)
