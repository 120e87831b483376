"""A prefix finds exactly the messages holding a word that starts with it, in every order and on
both databases; on PostgreSQL a prefix of at least four characters is read through the prefix
index (revision 0022: words by their first four characters and their message's id bucket),
newest buckets first, never from the word index, whose entry for a prefix is the bitmap of
every word it expands to over every id."""

from __future__ import annotations

import random

import pytest
from alembic import command
from sqlalchemy import text

from shared.db import Store
from shared.db.migrate import HEAD, alembic_config
from shared.search.backend import Filters, Order
from shared.search.postgresql import ddl, prefixes
from shared.search.postgresql.compiler import compile_words
from shared.search.query import parse
from tests.integration.search_kit import Log, backend_of, limits_of

pytestmark = pytest.mark.both_databases

ROLES = ("user", "assistant")
PADS = ("", " pad", " pad pad pad")  # shorter ranks higher: bm25 and ts_rank agree on it
WORDS = ("walrus", "walruses", "walr")


def _write(log: Log, store: Store, gap: int) -> list[tuple[int, int, str]]:
    """Five sessions of 30 messages, most holding `walr`, `walrus` or `walruses`, and one tool
    output holding `walrus` (not searched); on PostgreSQL the ids jump by `gap` before each
    session, so the matches lie in several id buckets with empty ones between. (id, padding,
    word) of the matches, in id order."""
    matches: list[tuple[int, int, str]] = []
    for s in range(5):
        if store.dialect == "postgresql" and gap:
            with store.write() as conn:
                conn.execute(
                    text("SELECT setval('messages_id_seq', (SELECT max(id) FROM messages) + :g)"),
                    {"g": gap},
                )
        texts: list[str | tuple[str, str]] = [
            "nothing here" if i % 7 == 3 else f"{WORDS[i % 3]}{PADS[(i + s) % 3]}"
            for i in range(30)
        ]
        texts[5] = ("tool", "walrus in a tool's output")
        for item, mid in zip(texts, log.session(f"s{s}", texts), strict=True):
            if isinstance(item, str) and item.startswith("walr"):
                matches.append((mid, item.count(" pad"), item.split()[0]))
    return sorted(matches)


def _hits(store: Store, order: Order, query: str) -> list[int]:
    backend = backend_of(store)
    with store.read() as conn:
        found = backend.hits(conn, parse(query), Filters(roles=ROLES), order)
        return [hit.message_id for hit in found]


def _ranked(matches: list[tuple[int, int, str]], window: int) -> list[int]:
    """Relevance: the newest `window` matches ranked (least padding first, then newest), then
    the next `window`..."""
    newest = sorted(matches, reverse=True)
    out: list[int] = []
    for at in range(0, len(newest), window):
        group = sorted(newest[at : at + window], key=lambda m: (m[1], -m[0]))
        out += [mid for mid, _pad, _word in group]
    return out


@pytest.mark.parametrize("gap", [0, 3000, 20_000])
@pytest.mark.parametrize("batch", [1, 3, 64])
def test_a_prefix_finds_every_match_once_across_id_buckets(
    store: Store, log: Log, monkeypatch: pytest.MonkeyPatch, batch: int, gap: int
) -> None:
    """Batches ending on and across the windows' edges, which are whole buckets of 8,192 ids
    (`gap`: the sessions' ids share a bucket, or lie in neighbouring or distant ones); a prefix
    longer than the index's four characters is checked on the words of the rows it admits."""
    limits = limits_of(store)
    matches = _write(log, store, gap)
    monkeypatch.setattr(limits, "BATCH", batch)
    monkeypatch.setattr(limits, "MAX_WINDOWS", 1000)
    for query in ("walr*", "WALRU*", "walruses*"):
        typed = query.lower().rstrip("*")
        wanted = [mid for mid, _pad, word in matches if word.startswith(typed)]
        assert wanted
        assert _hits(store, Order.NEWEST, query) == wanted[::-1], query
        assert _hits(store, Order.OLDEST, query) == wanted, query
    for window in (1, 3, 7, 256):
        monkeypatch.setattr(limits, "RANK_WINDOW", window)
        found = _hits(store, Order.RELEVANCE, "walr*")
        if store.dialect == "postgresql":  # ts_rank weighs each row alone, whatever its word
            assert found == _ranked(matches, window), window
        else:  # bm25 weighs the words a prefix expands to by how common each is
            assert sorted(found) == [mid for mid, _pad, _word in matches], window
    # tool output is read through the word index (the prefix index leaves it out)
    backend = backend_of(store)
    with store.read() as conn:
        tools = backend.hits(conn, parse("walr*"), Filters(roles=("tool",)), Order.NEWEST)
        assert len(list(tools)) == 5


def _scans(store: Store, query: str, order: Order) -> tuple[int, int, int]:
    """(hits taken, scans of the word index, scans of the prefix index) for the first three
    hits of `query`, in one transaction (pg_stat_get_xact_numscans counts its own scans)."""
    backend = backend_of(store)
    sql = (
        "SELECT pg_stat_get_xact_numscans('ix_messages_search_words'::regclass),"
        " pg_stat_get_xact_numscans('ix_messages_search_prefixes'::regclass)"
    )
    with store.read() as conn:
        db = conn.connection.driver_connection
        assert db is not None
        before = db.execute(sql).fetchone()  # counts not yet flushed may carry over
        found = backend.hits(conn, parse(query), Filters(roles=ROLES), order)
        taken = sum(1 for _ in zip(range(3), found, strict=False))
        after = db.execute(sql).fetchone()
    assert before is not None and after is not None
    return taken, int(after[0] - before[0]), int(after[1] - before[1])


@pytest.mark.parametrize("order", [Order.NEWEST, Order.OLDEST, Order.RELEVANCE])
def test_a_prefix_of_four_characters_is_read_through_the_prefix_index(
    store: Store, log: Log, order: Order
) -> None:
    """GIN builds a prefix's whole bitmap (every word it expands to, over every id) for any
    statement that reads it from the word index: 35-145 ms at 1.5M messages. A prefix of at
    least four characters reads the prefix index's entries of the newest ids' buckets instead;
    a shorter one, or a search of tool output, still reads the word index."""
    if store.dialect != "postgresql":
        pytest.skip("the PostgreSQL prefix index (FTS5 reads no bitmap)")
    _write(log, store, 20_000)
    taken, by_words, by_prefixes = _scans(store, "walr*", order)
    assert (taken, by_words) == (3, 0)
    assert by_prefixes >= 1
    taken, by_words, by_prefixes = _scans(store, "wal*", order)
    assert taken == 3
    assert by_prefixes == 0


def test_the_prefix_keys_of_a_text_admit_exactly_what_its_prefix_matches(store: Store) -> None:
    """For 600 random texts and four-character prefixes, over words with accents, in Greek,
    Cyrillic and Chinese, with digits: the prefix index's keys of the message's bucket admit a
    row exactly when the word index matches the prefix; Python's keys are PostgreSQL's."""
    if store.dialect != "postgresql":
        pytest.skip("the PostgreSQL prefix index")
    rng = random.Random(20261207)
    vocabulary = [
        "naïveté",
        "naive",
        "σοφία",
        "σοφός",
        "привет",
        "приват",
        "中文字符",
        "x1y2z3",
        "ab",
    ]
    starts = sorted({w[: ddl.PREFIX_CHARS] for w in vocabulary if len(w) >= ddl.PREFIX_CHARS})
    starts += ["naiv", "x1y2", "zzzz"]
    cases = []
    for n in range(600):
        content = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(0, 6)))
        typed = rng.choice(starts)
        tree = parse(f"{typed}*").tree
        start = prefixes.start_of(tree, ROLES)
        assert start is not None
        mid = rng.randrange(1, 1 << 20)
        span = (mid, mid)
        cases.append(
            (
                content,
                compile_words(tree),
                prefixes.keys(start, span, Order.NEWEST, None, None),
                mid,
                n,
            )
        )
    with store.read() as conn:
        rows = conn.execute(
            text(
                "SELECT v @@ CAST(w AS tsquery), hermes_search_prefixes(v, i) && CAST(k AS text[])"
                " FROM (SELECT to_tsvector('simple', hermes_search_words(c)) AS v, w, k, i, n"
                " FROM unnest(CAST(:c AS text[]), CAST(:w AS text[]), CAST(:k AS text[]),"
                " CAST(:i AS int[]), CAST(:n AS int[])) AS t(c, w, k, i, n)) AS cases ORDER BY n"
            ),
            {
                "c": [c[0] for c in cases],
                "w": [c[1] for c in cases],
                "k": ["{" + ",".join(f'"{key}"' for key in c[2]) + "}" for c in cases],
                "i": [c[3] for c in cases],
                "n": [c[4] for c in cases],
            },
        ).all()
    assert len(rows) == len(cases)
    for (content, words, keys, _mid, _n), (matches, admitted) in zip(cases, rows, strict=True):
        assert admitted == matches, (content, words, keys)
    assert sum(matches for matches, _admitted in rows) > 100


def test_the_upgrade_indexes_the_messages_there_and_the_downgrade_drops_the_index(
    store: Store, log: Log
) -> None:
    if store.dialect != "postgresql":
        pytest.skip("revision 0022 is PostgreSQL's only")
    matches = _write(log, store, 20_000)
    exists = (
        "SELECT to_regclass('ix_messages_search_prefixes') IS NOT NULL,"
        " to_regprocedure('hermes_search_prefixes(tsvector, integer)') IS NOT NULL"
    )
    with store.write() as conn:
        command.downgrade(alembic_config(conn), "0021")
        assert tuple(conn.execute(text(exists)).one()) == (False, False)
        command.upgrade(alembic_config(conn), HEAD)
        assert tuple(conn.execute(text(exists)).one()) == (True, True)
    assert _hits(store, Order.NEWEST, "walr*") == [mid for mid, _pad, _word in matches][::-1]
