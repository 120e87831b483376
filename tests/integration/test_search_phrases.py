"""Phrases find exactly the messages holding their words side by side, on both databases; on
PostgreSQL through the index of adjacent word pairs (revision 0020), which must admit every
message the phrase matches, even one whose pairs do not fit a tsvector."""

from __future__ import annotations

import random

import pytest
from sqlalchemy import text

from shared.db import Store
from shared.search.backend import Filters, Order
from shared.search.postgresql import words
from shared.search.postgresql.compiler import compile_pairs, compile_words
from shared.search.postgresql.limits import PROBE_SQL
from shared.search.postgresql.words import Words
from shared.search.query import parse
from tests.integration.search_kit import Log, backend_of, call, ids, limits_of

pytestmark = pytest.mark.both_databases

ROLES = ("user", "assistant")

TEXTS = {
    "side": "the config file is read at start",
    "apart": "the big config is elsewhere",
    "reversed": "config the other way round",
    "twice": "set the value, then the config: done",
    "prefix": "the configuration of the fleet",
    "three": "read the config file first",
}


@pytest.mark.parametrize(
    ("typed", "found"),
    [
        ('"the config"', {"side", "twice", "three"}),
        ('"config the"', {"reversed"}),
        ('"the conf"*', {"side", "twice", "prefix", "three"}),
        ('"the config file"', {"side", "three"}),
        ('"config file" read', {"side", "three"}),
        ('"the config" NOT start', {"twice", "three"}),
        ('"config the" OR "the fleet"', {"reversed", "prefix"}),
        ('"config file is" OR big', {"side", "apart"}),
        ('"the big"', {"apart"}),
        ('"big the"', set()),
    ],
)
@pytest.mark.parametrize("sort", ["relevance", "newest", "oldest"])
def test_a_phrase_finds_its_words_side_by_side_only(
    store: Store, log: Log, typed: str, found: set[str], sort: str
) -> None:
    for name, content in TEXTS.items():
        log.session(name, [content, "ok"])
    assert set(ids(call(store, query=typed, sort=sort, limit=10))) == found


def _cyrillic_word(n: int) -> str:
    letters = "абвгдежзиклмнопрстуфхцчшщэюя"
    word = ""
    while True:
        n, digit = divmod(n, len(letters))
        word += letters[digit]
        if n == 0:
            return "сл" + word


def test_a_message_of_long_or_many_words_is_stored_and_its_phrases_found(
    store: Store, log: Log
) -> None:
    """Two adjacent words of 1,500 characters (a pair over a tsvector lexeme's 2,047 bytes) and
    30,000 distinct Cyrillic words (pairs over a tsvector's 1 MB): on PostgreSQL each pair is
    a short key, so the pairs index takes such a message (the pairs themselves would have
    failed the turn's write) and its phrases are found (a query is under 500 characters, so
    only a prefix phrase reaches the long words)."""
    long_a, long_b = "a" * 1500, "b" * 1500
    log.session("long", [f"start {long_a} {long_b} end", "ok"])
    many = " ".join(_cyrillic_word(n) for n in range(30_000))
    log.session("many", [many, "ok"])
    log.session("other", [f"{long_b} {long_a}", f"{_cyrillic_word(11)} {_cyrillic_word(10)}"])

    assert ids(call(store, query=f'"start {long_a[:5]}"*')) == ["long"]
    phrase = f'"{_cyrillic_word(10)} {_cyrillic_word(11)} {_cyrillic_word(12)}"'
    assert ids(call(store, query=phrase)) == ["many"]
    assert ids(call(store, query=f'"{_cyrillic_word(11)} {_cyrillic_word(10)}"')) == ["other"]


def test_a_phrase_in_tool_output_is_found_when_tool_messages_are_searched(
    store: Store, log: Log
) -> None:
    """The pairs index leaves tool output out: a search that includes it reads its phrases
    through the word index."""
    log.session("tool", [("user", "run it"), ("tool", "exit status of the config check: 0")])
    log.session("talk", ["the config check passed", "good"])
    assert set(ids(call(store, query='"the config"', role_filter="user,tool"))) == {
        "tool",
        "talk",
    }
    assert ids(call(store, query='"the config"')) == ["talk"]
    assert ids(call(store, query='"status of"', role_filter="tool")) == ["tool"]


def test_the_pairs_of_a_text_admit_exactly_what_its_phrases_match(store: Store) -> None:
    """For 1,000 random texts over a few words and random phrases of 2-4 words: whatever the
    phrase matches, the pairs index admits; for two words, it admits nothing else (keys are
    hashes: a superset in general, but no two of these 64 pairs share a key). Python's keys
    are PostgreSQL's, for non-ASCII words too."""
    if store.dialect != "postgresql":
        pytest.skip("the PostgreSQL pairs index")
    rng = random.Random(20261206)
    vocabulary = ["the", "config", "file", "x1", "σοφια", "中文", "naïve", "b"]
    cases = []
    for _ in range(1000):
        words = [rng.choice(vocabulary) for _ in range(rng.randint(0, 24))]
        content = rng.choice([" ", " - ", ", "]).join(words)
        phrase = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(2, 4)))
        term = parse(f'"{phrase}"').tree
        cases.append((content, compile_words(term), compile_pairs(term), phrase.count(" ") == 1))
    with store.read() as conn:
        rows = conn.execute(
            text(
                "SELECT v @@ CAST(w AS tsquery), hermes_search_pairs(v) @@ CAST(p AS tsquery)"
                " FROM (SELECT to_tsvector('simple', hermes_search_words(c)) AS v, w, p, n"
                " FROM unnest(CAST(:c AS text[]), CAST(:w AS text[]), CAST(:p AS text[]),"
                " CAST(:n AS int[])) AS t(c, w, p, n)) AS cases ORDER BY n"
            ),
            {
                "c": [c[0] for c in cases],
                "w": [c[1] for c in cases],
                "p": [c[2] for c in cases],
                "n": list(range(len(cases))),
            },
        ).all()
    assert len(rows) == len(cases)
    matched = 0
    for (content, words, pairs, two), (phrase_matches, pairs_admit) in zip(
        cases, rows, strict=True
    ):
        assert pairs_admit or not phrase_matches, (content, words, pairs)
        if two:
            assert pairs_admit == phrase_matches, (content, words, pairs)
        matched += bool(phrase_matches)
    assert matched > 20  # the cases exercise matches, not only misses


def test_a_phrase_probe_reads_the_pairs_index(store: Store, log: Log) -> None:
    if store.dialect != "postgresql":
        pytest.skip("the PostgreSQL pairs index")
    log.session("s", ["the config file", *[f"filler {i}" for i in range(30)]])
    tree = parse('"the config"').tree
    words = Words(compile_words(tree) or "", compile_pairs(tree))
    params: list[object] = []
    sql = "EXPLAIN " + PROBE_SQL.format(matching=words.matching(params))
    with store.read() as conn:
        conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
        conn.exec_driver_sql("SET LOCAL enable_indexscan = off")
        plan = "\n".join(str(row[0]) for row in conn.exec_driver_sql(sql, tuple(params)))
    assert "ix_messages_search_pairs" in plan, plan
    assert ids(call(store, query='"the config"')) == ["s"]


@pytest.mark.parametrize("adjacent", [3, 40])
def test_a_phrase_outside_the_statistics_is_driven_by_its_counted_pairs(
    store: Store, log: Log, monkeypatch: pytest.MonkeyPatch, adjacent: int
) -> None:
    """On PostgreSQL a phrase whose pairs the planner estimates like any key outside the
    statistics has them counted: driven by them when they hold at most COUNTED_BIAS times the
    rows its words are estimated at, else by its words; the estimate it carries on is the
    count. Both ways find the same messages, on both databases."""
    texts = [f"walrus tusk note {i}" for i in range(adjacent)]
    texts += [f"tusk of a walrus {i}" for i in range(40)]  # both words, not side by side
    log.session("s", texts)
    assert len(call(store, query='"walrus tusk"', limit=10)["results"]) == 1
    expected = log.ids["s"][:adjacent]
    backend = backend_of(store)
    with store.read() as conn:
        found = backend.hits(conn, parse('"walrus tusk"'), Filters(roles=ROLES), Order.NEWEST)
        assert [hit.message_id for hit in found] == expected[::-1]
    if store.dialect != "postgresql":
        return
    tree = parse('"walrus tusk"').tree
    tsquery = compile_words(tree) or ""
    with store.read() as conn:
        db = conn.connection.driver_connection
        monkeypatch.setattr(limits_of(store), "COUNTED_BIAS", 10**9)
        by_pairs = words.driven(db, tree, tsquery, ROLES)
        monkeypatch.setattr(limits_of(store), "COUNTED_BIAS", 0)
        by_words = words.driven(db, tree, tsquery, ROLES)
    assert by_pairs.pairs is not None
    assert by_pairs.estimate == adjacent  # counted, not estimated
    assert by_words.pairs is None
