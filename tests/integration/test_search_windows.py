"""A search with many matches asks the newest ids first on PostgreSQL, window by window (the last
1/64 of the id range, 1/16, 1/4, the rest), on the word index and on the substring index: what
it finds is exactly what one query over every id finds, in every order and on both databases;
a match on a window's edge is found once, neither dropped nor counted twice (which would shift
every later ranked window)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.db import Store
from shared.search.backend import Filters, Hit, Order
from shared.search.postgresql import windows, words
from shared.search.query import parse
from tests.integration.search_kit import Log, backend_of, limits_of
from tests.integration.storekit import pg_trace

pytestmark = pytest.mark.both_databases

PADS = ("", " pad", " pad pad pad")  # shorter ranks higher: bm25 and ts_rank agree on it
ROLES = ("user", "assistant")


def _write(log: Log) -> list[tuple[int, int]]:
    """Five sessions of 40 messages; every message but each seventh holds `walrus`, padded by
    its place so ranks differ. (id, padding) of the matches, in id order."""
    matches: list[tuple[int, int]] = []
    for s in range(5):
        texts = ["nothing here" if i % 7 == 3 else f"walrus{PADS[(i + s) % 3]}" for i in range(40)]
        for text, mid in zip(texts, log.session(f"s{s}", texts), strict=True):
            if text.startswith("walrus"):
                matches.append((mid, text.count(" pad")))
    return sorted(matches)


def _hits(store: Store, order: Order, query: str = "walrus") -> list[int]:
    backend = backend_of(store)
    with store.read() as conn:
        found = backend.hits(conn, parse(query), Filters(roles=ROLES), order)
        return [hit.message_id for hit in found]


def _ranked(matches: list[tuple[int, int]], window: int) -> list[int]:
    """Relevance: the newest `window` matches ranked (least padding first, then newest), then
    the next `window`..."""
    newest = sorted(matches, reverse=True)
    out: list[int] = []
    for at in range(0, len(newest), window):
        group = sorted(newest[at : at + window], key=lambda m: (m[1], -m[0]))
        out += [mid for mid, _pad in group]
    return out


@pytest.mark.parametrize("reading", ["windows", "at once"])
@pytest.mark.parametrize("batch", [1, 2, 3, 5, 64])
def test_windows_find_every_match_once_in_every_order(
    store: Store, log: Log, monkeypatch: pytest.MonkeyPatch, batch: int, reading: str
) -> None:
    """(`at once`: on PostgreSQL, past a probe that found too many, every id in one bitmap read
    with the bounds checked on its rows, batch after batch.)"""
    limits = limits_of(store)
    postgresql = store.dialect == "postgresql"
    matches = _write(log)
    # On PostgreSQL: windows however narrow the id range, the probe skipped (so its few
    # matches do not stand in for the windows), and batches that end on and across edges.
    monkeypatch.setattr(limits, "WINDOW_MIN_SPAN", 0, raising=postgresql)
    if reading == "windows":
        monkeypatch.setattr(limits, "COMMON", 0, raising=postgresql)
    else:
        monkeypatch.setattr(limits, "COMMON", 10**9, raising=postgresql)
        monkeypatch.setattr(limits, "FEW", 0, raising=postgresql)
        monkeypatch.setattr(limits, "FEW_PAIRS", 10**9, raising=postgresql)
    monkeypatch.setattr(limits, "BATCH", batch)
    monkeypatch.setattr(limits, "MAX_WINDOWS", 1000)  # every ranked window, however small
    if postgresql:
        with store.read() as conn:
            db = conn.connection.driver_connection
            assert len(windows.windows(db, None, Order.NEWEST)) == 3
            assert len(windows.windows(db, None, Order.OLDEST)) == 3
    ids = [mid for mid, _pad in matches]
    assert _hits(store, Order.NEWEST) == ids[::-1]
    assert _hits(store, Order.OLDEST) == ids
    padded = [mid for mid, pad in matches if pad]  # a phrase: read as a bitmap on PostgreSQL
    assert _hits(store, Order.NEWEST, '"walrus pad"') == padded[::-1]
    assert _hits(store, Order.OLDEST, '"walrus pad"') == padded
    for window in (1, 3, 4, 7, 256):
        monkeypatch.setattr(limits, "RANK_WINDOW", window)
        assert _hits(store, Order.RELEVANCE) == _ranked(matches, window), window


PREFIX_READINGS = [
    "direct 1",
    "direct 5",
    "direct 37",
    "direct 1000000",
    "direct 1 then index",
    "direct 5 then index",
    "direct 37 then index",
    "at once",
    "windows",
]


@pytest.mark.parametrize("reading", PREFIX_READINGS)
@pytest.mark.parametrize("batch", [1, 3, 64])
def test_a_prefix_finds_every_match_once_however_it_is_read(
    store: Store, log: Log, monkeypatch: pytest.MonkeyPatch, batch: int, reading: str
) -> None:
    """On PostgreSQL a prefix the planner takes for common first walks the primary key over the
    newest (oldest) DIRECT_IDS ids (`direct N`: the direct window's edge inside a batch, on one,
    or past them all), and goes on walking as far as the density it found says the rest lies;
    `then index`: the walk is taken for dearer than the word index, which reads the rest from a
    window sized by that density, then window by window. Past the probe, a sparser one is read
    at once or in windows, always as bitmaps. Each finds exactly what one query over every id
    finds, in every order. (`wal*`: a prefix of four characters or more is read through the
    prefix index instead, `test_search_prefixes`.)"""
    limits = limits_of(store)
    postgresql = store.dialect == "postgresql"
    matches = _write(log)
    monkeypatch.setattr(limits, "WINDOW_MIN_SPAN", 0, raising=postgresql)
    if reading.startswith("direct"):
        monkeypatch.setattr(limits, "WALK_OVER", 0, raising=postgresql)  # taken for common
        monkeypatch.setattr(limits, "DIRECT_IDS", int(reading.split()[1]), raising=postgresql)
        if reading.endswith("then index"):
            monkeypatch.setattr(limits, "WALK_COST", 10**9, raising=postgresql)
            monkeypatch.setattr(limits, "FEW", 0, raising=postgresql)  # not probed
    else:
        monkeypatch.setattr(limits, "WALK_OVER", 10**9, raising=postgresql)
        monkeypatch.setattr(limits, "COMMON", 10**9, raising=postgresql)
        monkeypatch.setattr(limits, "FEW", 0, raising=postgresql)  # probed: too many
        monkeypatch.setattr(
            limits, "AT_ONCE", 10**9 if reading == "at once" else 0, raising=postgresql
        )
    monkeypatch.setattr(limits, "BATCH", batch)
    monkeypatch.setattr(limits, "MAX_WINDOWS", 1000)
    ids = [mid for mid, _pad in matches]
    assert _hits(store, Order.NEWEST, "wal*") == ids[::-1]
    assert _hits(store, Order.OLDEST, "wal*") == ids
    for window in (1, 3, 7, 256):
        monkeypatch.setattr(limits, "RANK_WINDOW", window)
        assert _hits(store, Order.RELEVANCE, "wal*") == _ranked(matches, window), window


def _word_index_scans(store: Store, query: str, order: Order) -> tuple[int, int]:
    """(hits taken, scans of the word index) for the first batch of `query`, in one
    transaction (pg_stat_get_xact_numscans counts the transaction's own scans)."""
    backend = backend_of(store)
    with store.read() as conn:
        db = conn.connection.driver_connection
        found = backend.hits(conn, parse(query), Filters(roles=ROLES), order)
        taken = sum(1 for _ in zip(range(3), found, strict=False))
        scans = db.execute(
            "SELECT pg_stat_get_xact_numscans('ix_messages_search_words'::regclass)"
        ).fetchone()
    return taken, int(scans[0])


@pytest.mark.parametrize("order", [Order.NEWEST, Order.OLDEST, Order.RELEVANCE])
def test_a_dense_prefix_fills_its_first_batch_without_its_index_entry(
    store: Store, log: Log, monkeypatch: pytest.MonkeyPatch, order: Order
) -> None:
    """GIN builds a prefix's whole bitmap (every word it expands to) for any statement that
    reads it, 35-70 ms for a dense one at 1.5M messages: a prefix whose first batch is in its
    newest ids is read there by the primary key, and its index entry is never read (`wal*`:
    one shorter than the prefix index's four characters)."""
    if store.dialect != "postgresql":
        pytest.skip("the direct window is how PostgreSQL reads a prefix (FTS5 reads no bitmap)")
    limits = limits_of(store)
    _write(log)
    monkeypatch.setattr(limits, "WINDOW_MIN_SPAN", 0)
    monkeypatch.setattr(limits, "WALK_OVER", 0)  # the planner takes it for common
    monkeypatch.setattr(limits, "BATCH", 3)
    monkeypatch.setattr(limits, "RANK_WINDOW", 3)
    monkeypatch.setattr(limits, "DIRECT_IDS", 20)  # holds 3 matches however the ids run
    assert _word_index_scans(store, "wal*", order) == (3, 0)
    monkeypatch.setattr(limits, "WALK_OVER", 10**9)  # not taken for common: probed by its index
    taken, scans = _word_index_scans(store, "wal*", order)
    assert taken == 3
    assert scans >= 1


@pytest.mark.parametrize("batch", [1, 2, 3, 64])
@pytest.mark.parametrize("query", ["中文", "中文日本"])
def test_substring_windows_find_every_match_once_in_every_order(
    store: Store, log: Log, monkeypatch: pytest.MonkeyPatch, batch: int, query: str
) -> None:
    """A short piece (`中文`: the newest messages checked directly first) and a longer one
    (`中文日本`: the newest SCAN_CHUNK checked directly, then its pieces' index entries) past the
    windows' edges."""
    limits = limits_of(store)
    postgresql = store.dialect == "postgresql"
    matches: list[int] = []
    for s in range(4):
        texts = ["没有" if i % 5 == 2 else f"说中文日本{'的' * (i % 3)}" for i in range(40)]
        for text, mid in zip(texts, log.session(f"s{s}", texts), strict=True):
            if query in text:
                matches.append(mid)
    matches.sort()
    monkeypatch.setattr(limits, "WINDOW_MIN_SPAN", 0, raising=postgresql)
    monkeypatch.setattr(limits, "FEW", 0, raising=postgresql)  # no probe's few stand in
    monkeypatch.setattr(limits, "BATCH", batch)
    monkeypatch.setattr(limits, "SCAN_ROWS", 3)
    monkeypatch.setattr(limits, "SCAN_CHUNK", 2)
    assert _hits(store, Order.NEWEST, query) == matches[::-1]
    assert _hits(store, Order.OLDEST, query) == matches
    if postgresql:  # substring matches weigh nothing there: newest first (SQLite: bm25)
        assert _hits(store, Order.RELEVANCE, query) == matches[::-1]


def _piece_index_reads(store: Store, tmp_path: Path, order: Order, query: str) -> tuple[int, int]:
    """(hits taken, statements naming the piece index) for the first three hits of `query`,
    from libpq's trace of the connection's messages."""
    backend = backend_of(store)
    with store.read() as conn, pg_trace(conn, tmp_path) as lines:
        found = backend.hits(conn, parse(query), Filters(roles=ROLES), order)
        taken = sum(1 for _ in zip(range(3), found, strict=False))
    sent = [line for line in lines if line[:2] == "F\t"]
    return taken, sum("hermes_search_grams(" in line for line in sent)


@pytest.mark.parametrize("order", [Order.NEWEST, Order.OLDEST])
def test_a_dense_longer_substring_fills_its_first_batch_from_the_newest_messages(
    store: Store, log: Log, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, order: Order
) -> None:
    """A substring of three characters or more whose pieces are in more than FEW messages
    (`について` at 1.5M messages) is checked on the newest (oldest) substring-indexed messages
    first, as a short one is: its window of the piece index read 5,600 rows (90-470 ms) for 64
    hits. Only the probe for a few matches then names the piece index."""
    if store.dialect != "postgresql":
        pytest.skip("the piece index is PostgreSQL's (SQLite: FTS5's trigram table)")
    limits = limits_of(store)
    for s in range(3):
        texts = [f"それについて{'話' * (i % 4)}" for i in range(20)]
        log.session(f"s{s}", [*texts, "会議の予定", "日本語のテキスト"])
    monkeypatch.setattr(limits, "WINDOW_MIN_SPAN", 0)
    monkeypatch.setattr(limits, "FEW", 5)
    monkeypatch.setattr(limits, "BATCH", 3)
    assert _piece_index_reads(store, tmp_path, order, "について") == (3, 1)
    # a rare one: its few matches are the probe's, read at once (as before)
    assert _piece_index_reads(store, tmp_path, order, "会議の予") == (3, 1)


@pytest.mark.parametrize("drive", ["words", "pairs in windows", "pairs at once"])
@pytest.mark.parametrize("batch", [1, 3, 64])
def test_a_phrase_finds_the_same_matches_whichever_index_drives_it(
    store: Store, log: Log, monkeypatch: pytest.MonkeyPatch, drive: str, batch: int
) -> None:
    """On PostgreSQL a phrase is read through the word index (its words' rows, positions
    checked on each), or through the pairs index, window by window (a common pair) or in one
    read (an uncommon one): every way finds exactly the phrase's matches, in every order."""
    limits = limits_of(store)
    postgresql = store.dialect == "postgresql"
    matches = _write(log)
    padded = [(mid, pad) for mid, pad in matches if pad]
    monkeypatch.setattr(limits, "WINDOW_MIN_SPAN", 0, raising=postgresql)
    monkeypatch.setattr(limits, "COMMON", 0, raising=postgresql)
    monkeypatch.setattr(limits, "BATCH", batch)
    monkeypatch.setattr(limits, "MAX_WINDOWS", 1000)
    monkeypatch.setattr(limits, "PAIRS_BIAS", 0 if drive == "words" else 1e9, raising=postgresql)
    monkeypatch.setattr(limits, "COUNTED_BIAS", 0 if drive == "words" else 1e9, raising=postgresql)
    monkeypatch.setattr(
        limits, "FEW_PAIRS", 1e9 if drive == "pairs at once" else -1, raising=postgresql
    )
    if postgresql:
        with store.read() as conn:
            tree = parse('"walrus pad"').tree
            db = conn.connection.driver_connection
            driven = words.driven(db, tree, "'walrus' <-> 'pad'", ROLES)
            read, _few, edges = words.reading(db, driven, Order.NEWEST)
        assert (driven.pairs is None) == (drive == "words")
        assert read.at_once == (drive == "pairs at once") == (not edges)
    ids = [mid for mid, _pad in padded]
    assert _hits(store, Order.NEWEST, '"walrus pad"') == ids[::-1]
    assert _hits(store, Order.OLDEST, '"walrus pad"') == ids
    assert _hits(store, Order.NEWEST, '"pad walrus"') == []
    bias, counted = limits.PAIRS_BIAS, getattr(limits, "COUNTED_BIAS", None)
    for window in (1, 4, 256):
        monkeypatch.setattr(limits, "RANK_WINDOW", window)
        ranked = _hits(store, Order.RELEVANCE, '"walrus pad"')
        assert sorted(ranked) == ids, window
        # each window of the newest matches ranked within itself, as the word index ranks it
        newest = ids[::-1]
        for at in range(0, len(ids), window):
            assert sorted(ranked[at : at + window]) == sorted(newest[at : at + window]), window
        if postgresql:
            monkeypatch.setattr(limits, "PAIRS_BIAS", 0)
            monkeypatch.setattr(limits, "COUNTED_BIAS", 0)
            assert ranked == _hits(store, Order.RELEVANCE, '"walrus pad"'), window
            monkeypatch.setattr(limits, "PAIRS_BIAS", bias)
            monkeypatch.setattr(limits, "COUNTED_BIAS", counted)


@pytest.mark.parametrize("trial", [0, 10**9])
def test_a_phrase_tried_as_one_window_ranks_as_the_windows_do(
    store: Store, log: Log, monkeypatch: pytest.MonkeyPatch, trial: int
) -> None:
    """SQLite tries a phrase with a word in at most TRIAL_DF messages as one window, oldest
    first: whether it fits (window 150: ~113 matches, `walrus` in 170) or not (1, 3, 7: walked
    again newest first), the hits are those of windows walked newest first."""
    if store.dialect != "sqlite":
        pytest.skip("SQLite's relevance windows")
    limits = limits_of(store)
    matches = _write(log)
    padded = [(mid, pad) for mid, pad in matches if pad]
    monkeypatch.setattr(limits, "TRIAL_DF", trial)
    monkeypatch.setattr(limits, "MAX_WINDOWS", 1000)
    for window in (1, 3, 7, 150, 256):
        monkeypatch.setattr(limits, "RANK_WINDOW", window)
        found = _hits(store, Order.RELEVANCE, '"walrus pad"')
        assert found == _ranked(padded, window), window


def _traced_hits(store: Store, query: str) -> tuple[list[Hit], list[str]]:
    """SQLite's hits for `query` by relevance, and the statements that found them."""
    backend = backend_of(store)
    statements: list[str] = []
    with store.read() as conn:
        raw = conn.connection.driver_connection
        raw.set_trace_callback(statements.append)
        try:
            found = list(backend.hits(conn, parse(query), Filters(roles=ROLES), Order.RELEVANCE))
        finally:
            raw.set_trace_callback(None)
    return found, statements


def test_a_single_match_is_weighed_only_when_merged_by_score(store: Store, log: Log) -> None:
    """SQLite: a window of one match needs no bm25 when its hits are the whole answer (a word
    in one message; a phrase with such a word): the match is found unweighed and no bm25 runs.
    Beside the substring stream of `OR 部署` the same match is weighed, since the merge of the
    two streams orders by score."""
    if store.dialect != "sqlite":
        pytest.skip("SQLite's relevance windows")
    [once, *_rest] = log.session("s", ["zyxwv token here", "nothing", "部署 text", "部署 again"])
    for query in ("zyxwv", '"zyxwv token"', "zyxwv token"):
        found, statements = _traced_hits(store, query)
        assert [(hit.message_id, hit.score) for hit in found] == [(once, 0.0)], query
        assert not [s for s in statements if "bm25(" in s], query
    found, statements = _traced_hits(store, "zyxwv OR 部署")
    [word] = [hit for hit in found if hit.index == "words"]
    assert word.message_id == once and word.score < 0
    assert [s for s in statements if "bm25(messages_fts)" in s]
    assert len(found) == 3
