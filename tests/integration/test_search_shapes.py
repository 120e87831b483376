"""session_search on a real state.db: scroll, read, browse, the source filter, bad arguments
and Python callers (the call shapes; test_search.py has discovery and the query language)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.db import Store
from shared.search import SearchRequest, search
from shared.search.request import ARGUMENTS
from shared.search.tool import SYSTEM_PROMPT, TOOL_NAME, TOOL_SCHEMA, run
from tests.integration.search_kit import Log, call, filler, ids, limits_of

pytestmark = pytest.mark.both_databases

# --- scroll ---


def test_scroll_moves_backwards_and_forwards_sharing_the_boundary(store: Store, log: Log) -> None:
    mids = log.session("s", filler(40))
    middle = call(store, session_id="s", around_message_id=mids[20], window=5)
    shown = [m["id"] for m in middle["messages"]]
    assert shown == mids[15:26]
    assert middle["messages_before"] == 5 and middle["messages_after"] == 5
    back = call(store, session_id="s", around_message_id=shown[0], window=5)
    back_ids = [m["id"] for m in back["messages"]]
    assert back_ids == mids[10:21] and shown[0] in back_ids
    forward = call(store, session_id="s", around_message_id=shown[-1], window=5)
    forward_ids = [m["id"] for m in forward["messages"]]
    assert forward_ids == mids[20:31] and shown[-1] in forward_ids
    assert [m["id"] for m in forward["messages"] if m.get("anchor")] == [shown[-1]]


def test_scroll_edges_show_fewer_messages(store: Store, log: Log) -> None:
    mids = log.session("s", filler(8))
    start = call(store, session_id="s", around_message_id=mids[1], window=5)
    assert [m["id"] for m in start["messages"]] == mids[0:7]
    assert start["messages_before"] == 1 and start["messages_after"] == 5  # 1 < 5: the start
    end = call(store, session_id="s", around_message_id=mids[-1], window=5)
    assert [m["id"] for m in end["messages"]] == mids[2:8]
    assert end["messages_before"] == 5 and end["messages_after"] == 0  # 0 < 5: the end


def test_scroll_window_is_capped_and_checked(store: Store, log: Log) -> None:
    mids = log.session("s", filler(60))
    wide = call(store, session_id="s", around_message_id=mids[30], window=99)
    assert len(wide["messages"]) == 41 and wide["window"] == 20
    assert call(store, session_id="s", around_message_id=mids[30])["window"] == 5
    assert "window" in call(store, session_id="s", around_message_id=mids[30], window=-1)["error"]


def test_scroll_errors(store: Store, log: Log) -> None:
    log.session("a", filler(3))
    other = log.session("b", filler(3))
    assert "not in session" in call(store, session_id="a", around_message_id=other[0])["error"]
    assert "not in session" in call(store, session_id="a", around_message_id=99_999)["error"]
    assert "session_id" in call(store, around_message_id=other[0])["error"]
    assert "whole number" in call(store, session_id="a", around_message_id="x")["error"]


# --- read ---


def test_read_a_short_session(store: Store, log: Log) -> None:
    mids = log.session("s", filler(6), title="short one")
    result = call(store, session_id="s")
    assert result["mode"] == "read" and result["title"] == "short one"
    assert [m["id"] for m in result["messages"]] == mids
    assert "omitted_messages" not in result


def test_read_caps_a_long_session(store: Store, log: Log) -> None:
    mids = log.session("s", filler(150))
    result = call(store, session_id="s")
    shown = [m["id"] for m in result["messages"]]
    assert shown == mids[:30] + mids[-30:]
    assert result["omitted_messages"] == 90 and "around_message_id" in result["note"]


def test_read_counts_one_left_out_message_as_one(store: Store, log: Log) -> None:
    log.session("s", filler(61))
    result = call(store, session_id="s")
    assert result["omitted_messages"] == 1 and result["note"].startswith("1 message after")


def test_read_by_title_and_unknown(store: Store, log: Log) -> None:
    log.session("20240101_000000_abcdef", filler(2), title="named thing")
    assert call(store, session_id="named thing")["session_id"] == "20240101_000000_abcdef"
    assert call(store, session_id="20240101_000000_abc")["session_id"] == "20240101_000000_abcdef"
    assert "not found" in call(store, session_id="nope")["error"]


# --- browse ---


def test_browse_lists_recent_lineages_with_previews(store: Store, log: Log) -> None:
    log.session("old", ["first question about llamas", "answer"], title="llamas")
    log.session("old2", ["continued llamas", "answer"], parent="old", title="llamas #2")
    log.session("new", ["what about alpacas", "answer"], source="telegram")
    result = call(store)
    assert result["mode"] == "browse"
    listed = [s["session_id"] for s in result["sessions"]]
    assert listed == ["new", "old2"]
    assert result["sessions"][0]["preview"] == "what about alpacas"
    assert result["sessions"][1]["title"] == "llamas #2"
    assert {"started", "last_active", "message_count"} <= set(result["sessions"][0])
    only = call(store, source="telegram")
    assert [s["session_id"] for s in only["sessions"]] == ["new"]


def test_browse_limit_and_more(store: Store, log: Log) -> None:
    for i in range(14):
        log.session(f"s{i:02}", ["hello", "hi"])
    result = call(store)
    assert result["count"] == 10 and result["more"] is True
    assert call(store, limit=3)["count"] == 3
    capped = call(store, limit=20)  # capped at MAX_LIMIT: 10 of the 14, more to come
    assert capped["count"] == 10 and capped["more"] is True
    assert call(store, source="telegram") == {
        "mode": "browse", "count": 0, "sessions": [], "more": False
    }  # fmt: skip


def test_browse_says_when_everything_is_listed(store: Store, log: Log) -> None:
    for i in range(4):
        log.session(f"s{i}", ["hello", "hi"])
    result = call(store, current="s0")
    assert [s["session_id"] for s in result["sessions"]] == ["s3", "s2", "s1"]
    assert result["count"] == 3 and result["more"] is False


# --- filters, arguments, windows of relevance ---


def test_source_filter(store: Store, log: Log) -> None:
    log.session("cli1", ["the otter plan", "ok"])
    log.session("tg1", ["the otter plan", "ok"], source="telegram")
    assert ids(call(store, query="otter", source="telegram")) == ["tg1"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"query": "x", "sort": "sideways"}, "sort"),
        ({"query": "x", "limit": "many"}, "limit"),
        ({"query": "x", "limit": 0}, "limit"),
        ({"query": 42}, "query"),
        ({"query": "x", "colour": "red"}, "unknown argument"),
        ({"query": "x", "window": True}, "window"),
    ],
)
def test_bad_arguments_are_error_objects(store: Store, args: dict[str, Any], message: str) -> None:
    result = call(store, **args)
    assert message in result["error"]


def test_non_object_arguments(store: Store) -> None:
    assert "JSON object" in run(store, ["query"], None)["error"]  # type: ignore[arg-type]
    assert run(store, None, None)["mode"] == "browse"


def test_relevance_walks_windows_and_ranks_common_terms_newest_first(
    store: Store, log: Log, monkeypatch: pytest.MonkeyPatch
) -> None:
    limits = limits_of(store)
    monkeypatch.setattr(limits, "RANK_WINDOW", 4)
    # SQLite's bm25 skips a term in more messages than this; ts_rank weighs rows on their own
    monkeypatch.setattr(limits, "MAX_SCORED_DF", 3, raising=store.dialect == "sqlite")
    for i in range(12):
        log.session(f"s{i:02}", [f"common word {i}", "ok"])
    result = call(store, query="common", limit=10)
    assert result["count"] == 10
    assert ids(result)[:4] == ["s11", "s10", "s09", "s08"]  # too common to weigh: newest first
    rare = call(store, query="common 3", limit=10)
    assert ids(rare) == ["s03"]


def test_python_callers_get_the_same_engine(store: Store, log: Log) -> None:
    log.session("s", ["the capybara", "ok"])
    assert ids(search(store, SearchRequest(query="capybara"))) == ["s"]
    assert "sort" in search(store, SearchRequest(query="capybara", sort="up"))["error"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"window": -1}, "window must be at least 0"),
        ({"limit": -2}, "limit must be at least 1"),
        ({"limit": 0}, "limit must be at least 1"),
        ({"window": "wide"}, "window must be a whole number"),
    ],
)
def test_python_callers_get_the_json_ranges(
    store: Store, log: Log, fields: dict[str, Any], message: str
) -> None:
    log.session("s", ["the capybara", "ok"])
    for request in (SearchRequest(query="capybara", **fields), SearchRequest(**fields)):
        result = search(store, request)
        assert message in result["error"], result


def test_python_callers_windows_and_limits_are_capped_like_json(store: Store, log: Log) -> None:
    texts = filler(60)
    texts[30] = "the capybara in the middle"
    mids = log.session("s", texts)
    for i in range(12):
        log.session(f"o{i:02}", ["another capybara", "ok"])
    result = search(store, SearchRequest(query="capybara", window=99, limit=50, sort="oldest"))
    assert result["count"] == 10  # MAX_LIMIT
    [first] = [r for r in result["results"] if r["session_id"] == "s"]
    assert [m["id"] for m in first["messages"]] == mids[10:51]  # MAX_WINDOW each side
    scrolled = search(store, SearchRequest(session_id="s", around_message_id=mids[30], window=99))
    assert scrolled["window"] == 20 and len(scrolled["messages"]) == 41


def test_tool_schema_matches_the_arguments() -> None:
    function = TOOL_SCHEMA["function"]
    assert function["name"] == TOOL_NAME == "session_search"
    assert set(function["parameters"]["properties"]) == ARGUMENTS
    assert "session_search" in SYSTEM_PROMPT
    json.dumps(TOOL_SCHEMA)
