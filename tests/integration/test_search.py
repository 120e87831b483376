"""session_search on a real state.db: every call shape, lineage dedup, windows, roles, errors."""

from __future__ import annotations

import pytest

from shared.db import Store
from shared.store.messages import append_message
from shared.store.sessions import create_session
from tests.integration.search_kit import Log, call, filler, ids, limits_of

pytestmark = pytest.mark.both_databases

# --- discover ---


def test_discover_returns_the_full_shape(store: Store, log: Log) -> None:
    texts = filler(10)
    texts[5] = "we fixed the kubernetes ingress timeout"
    mids = log.session("s1", texts, title="ingress fix")
    result = call(store, query="kubernetes")
    assert result["mode"] == "discover" and result["count"] == 1
    [hit] = result["results"]
    assert set(hit) >= {
        "session_id", "title", "when", "source", "snippet", "bookend_start", "messages",
        "bookend_end", "match_message_id", "messages_before", "messages_after",
    }  # fmt: skip
    assert hit["session_id"] == "s1" and hit["title"] == "ingress fix" and hit["source"] == "cli"
    assert hit["when"].endswith("Z")
    assert "⟦kubernetes⟧" in hit["snippet"]
    assert hit["match_message_id"] == mids[5]
    window = [m["id"] for m in hit["messages"]]
    assert window == mids[0:10]  # ±5 around index 5: 0..9 (only 4 after it exist)
    assert [m["id"] for m in hit["messages"] if m.get("anchor")] == [mids[5]]
    # shown before and after the anchor: 4 after, fewer than the window, is the end
    assert hit["messages_before"] == 5 and hit["messages_after"] == 4
    assert hit["bookend_start"] == [] and hit["bookend_end"] == []  # all inside the window


def test_bookends_are_first_and_last_three_conversation_messages(store: Store, log: Log) -> None:
    texts: list[str | tuple[str, str]] = [*filler(30)]
    texts[15] = "the flamingo incident"
    texts[1] = ("tool", "tool output at the start")
    mids = log.session("s1", texts)
    [hit] = call(store, query="flamingo", window=2)["results"]
    assert [m["id"] for m in hit["messages"]] == mids[13:18]
    assert [m["id"] for m in hit["bookend_start"]] == [mids[0], mids[2], mids[3]]
    assert [m["id"] for m in hit["bookend_end"]] == mids[27:30]
    assert hit["messages_before"] == 2 and hit["messages_after"] == 2  # the window's


def test_one_result_per_lineage(store: Store, log: Log) -> None:
    log.session("root", ["deploy the parser", "ok"])
    log.session("cont2", ["deploy again", "sure"], parent="root")
    log.session("cont3", ["deploy a third time", "done"], parent="cont2")
    log.session("other", ["unrelated deploy", "fine"])
    result = call(store, query="deploy", limit=10)
    assert result["count"] == 2
    [chain] = [r for r in result["results"] if r["session_id"] != "other"]
    assert chain["session_id"] in {"root", "cont2", "cont3"}
    assert chain.get("lineage_root_id", chain["session_id"]) == "root"


def test_newest_and_oldest_pick_the_lineage_end_by_time(store: Store, log: Log) -> None:
    log.session("root", ["deploy the parser", "ok"])
    log.session("cont", ["deploy again", "sure"], parent="root")
    log.session("other", ["unrelated deploy", "fine"])
    assert ids(call(store, query="deploy", sort="newest")) == ["other", "cont"]
    assert ids(call(store, query="deploy", sort="oldest")) == ["root", "other"]


def test_limit_defaults_to_three_and_caps_at_ten(store: Store, log: Log) -> None:
    for i in range(12):
        log.session(f"s{i:02}", [f"gizmo number {i}", "noted"])
    assert call(store, query="gizmo")["count"] == 3
    assert call(store, query="gizmo", limit=5)["count"] == 5
    assert call(store, query="gizmo", limit=50)["count"] == 10


def test_sort_orders(store: Store, log: Log) -> None:
    for i in range(4):
        log.session(f"s{i}", [f"widget {i}", "noted"])
    assert ids(call(store, query="widget", sort="newest", limit=4)) == ["s3", "s2", "s1", "s0"]
    assert ids(call(store, query="widget", sort="oldest", limit=4)) == ["s0", "s1", "s2", "s3"]
    assert call(store, query="widget")["sort"] == "relevance"


def test_relevance_prefers_the_denser_match(store: Store, log: Log) -> None:
    log.session("dense", ["pelican pelican pelican", "ok"])
    log.session("thin", ["a long message that mentions a pelican once among many other words"])
    assert ids(call(store, query="pelican"))[0] == "dense"


def test_query_language(store: Store, log: Log) -> None:
    log.session("a", ["rate limit hit on the gateway", "ok"])
    log.session("b", ["the limit of the rate card", "ok"])
    log.session("c", ["postgres migration plan", "ok"])
    log.session("d", ["sqlite vacuum plan", "ok"])
    assert sorted(ids(call(store, query="rate limit", limit=10))) == ["a", "b"]
    assert ids(call(store, query='"rate limit"', limit=10)) == ["a"]
    assert sorted(ids(call(store, query="postgres OR sqlite", limit=10))) == ["c", "d"]
    assert ids(call(store, query="plan NOT sqlite", limit=10)) == ["c"]
    assert ids(call(store, query="migra*", limit=10)) == ["c"]
    assert ids(call(store, query="gate*", limit=10)) == ["a"]


@pytest.mark.parametrize(
    ("typed", "found"),
    [
        ("chat-send", {"hyphen"}),
        ("foo(bar", {"paren"}),
        ('"unbalanced', {"quote"}),
        ("TODO OR", {"todo"}),
        ("TODO: fix", {"todo"}),
        ("C++", {"cpp"}),
        ("🎉 party", {"emoji"}),
        ("foo *", {"paren"}),
    ],
)
def test_ordinary_typing_finds_what_it_says(
    store: Store, log: Log, typed: str, found: set[str]
) -> None:
    log.session("hyphen", ["call chat-send with the payload", "ok"])
    log.session("paren", ["foo(bar) returns nothing", "ok"])
    log.session("quote", ["an unbalanced tree", "ok"])
    log.session("todo", ["TODO: fix the flaky test", "ok"])
    log.session("cpp", ["rewrite it in C++ please", "ok"])
    log.session("emoji", ["🎉 party tonight", "ok"])
    result = call(store, query=typed, limit=10)
    assert "error" not in result
    assert set(ids(result)) == found


@pytest.mark.parametrize("typed", ["*", "🎉", "NOT deploy", "OR", '""', "   ", "a OR NOT b"])
def test_a_query_that_means_nothing_is_a_clear_error(store: Store, log: Log, typed: str) -> None:
    log.session("s", ["deploy 🎉", "ok"])
    result = call(store, query=typed)
    assert result["mode"] == "discover"
    assert isinstance(result["error"], str) and len(result["error"]) > 20
    assert "results" not in result


def test_no_match_is_said_not_silent(store: Store, log: Log) -> None:
    log.session("s", ["hello", "there"])
    result = call(store, query="zebra")
    assert result["results"] == [] and result["count"] == 0
    assert "no earlier conversation matches" in result["note"]


def test_dropped_bits_are_noted(store: Store, log: Log) -> None:
    log.session("s", ["party time", "ok"])
    result = call(store, query="🎉 party")
    assert ids(result) == ["s"] and "🎉" in result["note"]


# --- roles ---


def test_roles_default_to_user_and_assistant(store: Store, log: Log) -> None:
    log.session("s", [("user", "run it"), ("tool", "traceback: segfault in libfoo"), "done"])
    assert call(store, query="segfault")["results"] == []
    [hit] = call(store, query="segfault", role_filter="tool")["results"]
    assert hit["messages"][0]["role"] == "tool" and "⟦segfault⟧" in hit["snippet"]
    both = call(store, query="segfault", role_filter="user, tool")
    assert ids(both) == ["s"]


def test_the_window_follows_the_role_filter(store: Store, log: Log) -> None:
    mids = log.session(
        "s", [("user", "a"), ("tool", "b"), ("assistant", "needle here"), ("tool", "c"), "d"]
    )
    [hit] = call(store, query="needle", window=1)["results"]
    assert [m["id"] for m in hit["messages"]] == [mids[0], mids[2], mids[4]]
    [hit] = call(store, query="needle", window=1, role_filter="user,assistant,tool")["results"]
    assert [m["id"] for m in hit["messages"]] == [mids[1], mids[2], mids[3]]


def test_tool_output_is_indexed_up_to_its_cap(store: Store, log: Log) -> None:
    log.session("s", [("user", "go"), ("tool", "x " * 3000 + "late_marker")])
    assert call(store, query="late_marker", role_filter="tool")["results"] == []


def test_tool_calls_are_named_in_windows(store: Store, log: Log) -> None:
    with store.write() as conn:
        create_session(conn, session_id="s", source="cli", now=1.0)
        append_message(conn, "s", "user", "check the disk usage", now=2.0)
        append_message(
            conn,
            "s",
            "assistant",
            None,
            now=3.0,
            tool_calls=[{"id": "c1", "type": "function", "function": {"name": "shell"}}],
        )
    [hit] = call(store, query="disk")["results"]
    assert hit["messages"][1]["tool_calls"] == ["shell"] and hit["messages"][1]["content"] == ""


def test_bad_role_filter_is_an_error(store: Store, log: Log) -> None:
    log.session("s", ["hi", "there"])
    assert "role_filter" in call(store, query="hi", role_filter="robot")["error"]
    assert "role_filter" in call(store, query="hi", role_filter=" , ")["error"]


# --- unsegmented scripts ---


@pytest.mark.parametrize(
    ("typed", "found"),
    [
        ("中", {"zh", "zh2"}),
        ("中文", {"zh"}),
        ("喜欢中文", {"zh"}),
        ("我喜欢中文", {"zh"}),
        ("日本語", {"ja"}),
        ("カタカナ", {"ja"}),
        ("の", {"ja"}),
        ("ภาษา", {"th"}),
        ("中文 OR english", {"zh", "en"}),
        ("中文 NOT 日本", {"zh"}),
        ("python 中文", {"zh"}),
        ('"中文和"', {"zh"}),
        ("文字", set()),
    ],
)
def test_unsegmented_text_is_found_by_substring(
    store: Store, log: Log, typed: str, found: set[str]
) -> None:
    log.session("zh", ["我喜欢中文和python", "好"])
    log.session("zh2", ["中国", "好"])
    log.session("ja", ["日本語のカタカナ", "はい"])
    log.session("th", ["ภาษาไทยง่าย", "ครับ"])
    log.session("en", ["plain english text", "ok"])
    result = call(store, query=typed, limit=10)
    assert set(ids(result)) == found, result
    for hit in result["results"]:
        assert "⟦" in hit["snippet"]


@pytest.mark.parametrize(
    ("typed", "found"),
    [
        ("deploy NOT 中文", {"plain", "ja"}),
        ("deploy NOT (中文 OR 日本)", {"plain"}),
        ("deploy NOT (中文 friday)", {"plain", "zh", "ja"}),
        ("deploy (中文 OR friday)", {"plain", "zh"}),
        ("(deploy NOT 中文) OR release", {"plain", "ja", "release"}),
        ("release OR 中文", {"release", "zh", "zh_only"}),
        ("deploy 中文", {"zh"}),
        ("deploy NOT friday", {"zh", "ja"}),
    ],
)
@pytest.mark.parametrize("sort", ["relevance", "newest", "oldest"])
def test_mixed_latin_and_unsegmented_terms_route_by_what_must_match(
    store: Store, log: Log, typed: str, found: set[str], sort: str
) -> None:
    log.session("plain", ["we deploy on friday", "ok"])
    log.session("zh", ["deploy 中文 docs", "ok"])
    log.session("ja", ["deploy 日本語 docs", "ok"])
    log.session("release", ["release notes", "ok"])
    log.session("zh_only", ["中文 only", "ok"])
    result = call(store, query=typed, limit=10, sort=None if sort == "relevance" else sort)
    assert set(ids(result)) == found, result
    for hit in result["results"]:
        assert "⟦" in hit["snippet"]


def test_substrings_are_exact_though_the_index_keeps_no_positions(store: Store, log: Log) -> None:
    log.session("whole", ["我们说中文日本的事", "好"])
    log.session("scattered", ["中文日 还有 文日本", "好"])  # both trigrams, not the string
    log.session("kept", ["中文 日本語 本語で", "好"])
    log.session("dropped", ["中文 日本語で", "好"])
    assert ids(call(store, query="中文日本", limit=10)) == ["whole"]
    assert set(ids(call(store, query="中文 NOT 日本語で", limit=10))) == {
        "whole",
        "scattered",
        "kept",
    }
    for sort in ("newest", "oldest"):
        assert ids(call(store, query="中文日本", sort=sort, limit=10)) == ["whole"]


def test_short_common_term_paths(store: Store, log: Log, monkeypatch: pytest.MonkeyPatch) -> None:
    """A short term with many trigrams: the newest messages are checked directly, then the rest
    goes through the full expansion; both give the same sessions as the plain path."""
    limits = limits_of(store)
    for i in range(8):
        log.session(f"s{i}", [f"这是第{i}个测试{'的' * i}", "好的"])
    expected = {f"s{i}" for i in range(8)}
    plain = set(ids(call(store, query="测", limit=10)))
    assert plain == expected
    monkeypatch.setattr(limits, "MAX_EXPANSION", 1, raising=store.dialect == "sqlite")
    monkeypatch.setattr(limits, "SCAN_ROWS", 3)
    monkeypatch.setattr(limits, "SCAN_CHUNK", 2)
    for sort in (None, "newest", "oldest"):
        result = call(store, query="测", limit=10, sort=sort)
        assert set(ids(result)) == expected, sort
    assert ids(call(store, query="测", sort="newest", limit=2)) == ["s7", "s6"]
    assert ids(call(store, query="测", sort="oldest", limit=2)) == ["s0", "s1"]


def test_common_short_term_beside_a_rare_one(
    store: Store, log: Log, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`我 配置 鹓鶵鸑鷟`: the rare term chooses the rows (the common short ones, too common to
    expand, are checked on them), so an old fact past the directly checked newest messages is
    found, in every order, and nothing holding only the common terms comes with it."""
    limits = limits_of(store)
    log.session("old", ["我之前说过配置里的鹓鶵鸑鷟应该是42", "好的"])
    log.session("rare-only", ["鹓鶵鸑鷟是什么", "不知道"])
    for i in range(6):
        log.session(f"new{i}", [f"我说过配置第{i}次{'的' * i}", "好的"])
    monkeypatch.setattr(limits, "MAX_EXPANSION", 1, raising=store.dialect == "sqlite")
    monkeypatch.setattr(limits, "SCAN_ROWS", 2)
    monkeypatch.setattr(limits, "SCAN_CHUNK", 2)
    for sort in (None, "newest", "oldest"):
        assert ids(call(store, query="我 配置 鹓鶵鸑鷟", sort=sort, limit=10)) == ["old"], sort
    assert set(ids(call(store, query="我 配置", limit=10))) == {"old"} | {
        f"new{i}" for i in range(6)
    }


def test_cjk_index_follows_deletes_and_edits(store: Store, log: Log) -> None:
    from sqlalchemy import text

    log.session("zh", ["我喜欢中文", "好"])
    log.session("zh2", ["中文很难", "好"])
    with store.write() as conn:
        conn.execute(text("DELETE FROM sessions WHERE id = 'zh2'"))
        conn.execute(
            text("UPDATE messages SET content = '现在说日语' WHERE content = '我喜欢中文'")
        )
    assert call(store, query="中文")["results"] == []
    assert ids(call(store, query="日语")) == ["zh"]
    if store.dialect != "sqlite":
        return  # FTS5's own check of the trigram index against its source
    with store.read() as conn:
        check = conn.execute(
            text("INSERT INTO messages_cjk(messages_cjk, rank) VALUES ('integrity-check', 1)")
        )
        check.close()


# --- current session ---


def test_the_current_session_is_left_out_but_its_ancestors_stay(store: Store, log: Log) -> None:
    log.session("old", ["we chose the walrus design", "ok"])
    log.session("now", ["the walrus design again", "ok"], parent="old")
    log.session("elsewhere", ["walrus facts", "ok"])
    result = call(store, current="now", query="walrus", limit=10)
    assert sorted(ids(result)) == ["elsewhere", "old"]
    assert all(m["id"] not in log.ids["now"] for r in result["results"] for m in r["messages"])
    browse = call(store, current="now")
    assert "now" not in [s["session_id"] for s in browse["sessions"]]
