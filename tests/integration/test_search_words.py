"""What counts as a word is the same on both databases: FTS5's unicode61 (accents dropped,
split at everything but letters and digits) and the PostgreSQL tsvector built to match it;
and on PostgreSQL the substring index serves terms of every length (no scan of messages)."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from shared.db import Store
from shared.search.postgresql import ddl
from shared.search.postgresql.compiler import compile_substrings, predicate, words_of
from shared.search.postgresql.limits import PROBE_SQL
from shared.search.query import parse
from tests.integration.search_kit import Log, call, ids

pytestmark = pytest.mark.both_databases

TEXTS = {
    "accents": "Naïve CAFÉ in Zürich",
    "joined": "call chat-send on foo_bar.py at 10:30",
    "digits": "version v2 of x86_64 and 3.14",
    "greek": "ΣΟΦΙΑ says hello",
}


@pytest.mark.parametrize(
    ("typed", "found"),
    [
        ("cafe", {"accents"}),
        ("café", {"accents"}),
        ("NAIVE", {"accents"}),
        ("zurich", {"accents"}),
        ("chat", {"joined"}),
        ("send", {"joined"}),
        ("foo", {"joined"}),
        ("bar", {"joined"}),
        ("py", {"joined"}),
        ('"foo bar py"', {"joined"}),
        ("foo_bar", {"joined"}),
        ("30", {"joined"}),
        ("v2", {"digits"}),
        ("x86", {"digits"}),
        ("64", {"digits"}),
        ("14", {"digits"}),
        ("σοφια", {"greek"}),
        ("σοφ*", {"greek"}),
        ("chat-s*", {"joined"}),
        ("chats", set()),
        ("ver", set()),
    ],
)
def test_words_are_the_same_on_both_databases(
    store: Store, log: Log, typed: str, found: set[str]
) -> None:
    for name, content in TEXTS.items():
        log.session(name, [content, "ok"])
    result = call(store, query=typed, limit=10)
    assert set(ids(result)) == found, result


def test_python_folds_query_words_as_postgresql_folds_the_text(store: Store) -> None:
    if store.dialect != "postgresql":
        pytest.skip("the PostgreSQL word folding")
    with store.read() as conn:
        for content in TEXTS.values():
            folded = conn.execute(text("SELECT hermes_search_words(:t)"), {"t": content}).scalar()
            assert str(folded).split() == words_of(content)


@pytest.mark.parametrize("typed", ["中", "中文", "我喜欢中文", "中文 NOT 日本", "中 OR 日本語"])
def test_the_substring_index_serves_every_length(store: Store, log: Log, typed: str) -> None:
    if store.dialect != "postgresql":
        pytest.skip("the PostgreSQL substring index")
    log.session("zh", ["我喜欢中文和python", "好"])
    tree = parse(typed).tree
    params: list[object] = []
    narrowing = compile_substrings(tree, params)
    condition = predicate(tree, params)
    sql = (
        f"EXPLAIN SELECT m.id FROM messages AS m WHERE {ddl.unsegmented()} AND {narrowing}"
        f" AND {condition} ORDER BY m.id DESC LIMIT 64"
    )
    with store.read() as conn:
        conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
        plan = "\n".join(str(row[0]) for row in conn.exec_driver_sql(sql, tuple(params)))
    assert "ix_messages_search_grams" in plan and "Seq Scan" not in plan, plan


def test_a_word_matched_through_its_accents_is_marked_in_the_snippet(
    store: Store, log: Log
) -> None:
    if store.dialect != "sqlite":
        pytest.skip("the engine marks words as typed; FTS5's own snippet marks what it folded")
    log.session("accents", [TEXTS["accents"], "ok"])
    log.session("plain", ["a cafe on the corner", "ok"])
    result = call(store, query="cafe", limit=10)
    snippets = {hit["session_id"]: hit["snippet"] for hit in result["results"]}
    assert "⟦CAFÉ⟧" in snippets["accents"]  # FTS5's snippet: the engine's marks nothing there
    assert "⟦cafe⟧" in snippets["plain"]


def test_a_word_query_probes_the_word_index_not_the_primary_key(store: Store, log: Log) -> None:
    """The probe before a word query's id-ordered reads must come from the GIN index: walking
    the primary key and filtering costs seconds for a rare word at 1.5M messages."""
    if store.dialect != "postgresql":
        pytest.skip("the PostgreSQL word index")
    log.session("old", ["a quokka was here"] + [f"filler message {i}" for i in range(30)])
    with store.read() as conn:
        conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
        conn.exec_driver_sql("SET LOCAL enable_indexscan = off")
        plan = "\n".join(
            str(row[0])
            for row in conn.exec_driver_sql(
                "EXPLAIN " + PROBE_SQL.format(matching="m.search_words @@ %s::tsquery"),
                ("'quokka'",),
            )
        )
    assert "ix_messages_search_words" in plan and "messages_pkey" not in plan, plan
    assert ids(call(store, query="quokka")) == ["old"]


@pytest.mark.parametrize("sort", ["relevance", "newest", "oldest"])
def test_a_word_the_planner_knows_as_common_is_found_without_the_probe(
    store: Store, log: Log, monkeypatch: pytest.MonkeyPatch, sort: str
) -> None:
    """A common word skips the probe (its bitmap would list most of the table) and walks the
    matches in id order; what it finds is what the probed path finds."""
    if store.dialect != "postgresql":
        pytest.skip("the PostgreSQL word index")
    from shared.search.postgresql import limits, words

    for n in range(6):
        log.session(f"s{n}", [f"walrus note {i} of {n}" for i in range(12)])
    log.session("other", ["nothing to see"])
    with store.write() as conn:
        conn.exec_driver_sql("ANALYZE messages")
    with store.read() as conn:
        estimate = words.estimated_rows(conn.connection.driver_connection, words.Words("'walrus'"))
    assert estimate > 10, estimate

    probed = call(store, query="walrus", sort=sort, limit=5)
    monkeypatch.setattr(limits, "COMMON", 10)
    walked = call(store, query="walrus", sort=sort, limit=5)
    assert len(ids(walked)) == 5
    assert walked == probed
