"""Lineages and resolving a session argument (id, unique prefix, title lineage) on a real
state.db: numbering, parent links rather than lookalike titles, distinct auto-titles."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Connection

from shared.db import AmbiguousSession, SessionNotFound, Store
from shared.store import lineage, resume
from shared.store import sessions as session_rows
from shared.store.messages import append_message
from shared.titles import MAX_TITLE_CHARS, TitleSource
from tests.integration.storekit import new

pytestmark = pytest.mark.both_databases

# --- lineage: "x" -> "x #2" -> "x #3" ---


def compress(conn: Connection, parent: str, child: str, now: float) -> str:
    """What /compress does to titles: the continuation takes the next title of the lineage."""
    record = session_rows.require_session(conn, parent)
    assert record.title is not None
    title = lineage.continuation_title(conn, record.title)
    new(
        conn,
        child,
        now=now,
        title=title,
        title_source=TitleSource.DERIVED,
        parent_session_id=parent,
    )
    return title


def test_lineage_numbering(store: Store) -> None:
    with store.write() as conn:
        new(conn, "s1", now=1.0, title="my project")
        assert compress(conn, "s1", "s2", 2.0) == "my project #2"
        assert compress(conn, "s2", "s3", 3.0) == "my project #3"
        assert compress(conn, "s1", "s4", 4.0) == "my project #4"  # branching from the root
        assert lineage.continuation_title(conn, "unrelated") == "unrelated #2"


def test_lineage_ignores_lookalikes_and_wildcards(store: Store) -> None:
    with store.write() as conn:
        new(conn, "a", title="100% done")
        new(conn, "b", title="100x done #7")  # `%` must not match "x"
        new(conn, "c", title="50_50")
        new(conn, "d", title="50-50 #9")  # `_` must not match "-"
        new(conn, "e", title="100% done #2 notes")
        assert lineage.continuation_title(conn, "100% done") == "100% done #2"
        assert lineage.continuation_title(conn, "50_50") == "50_50 #2"


def test_numbering_a_title_at_the_limit(store: Store) -> None:
    base = ("long title " * 10)[:MAX_TITLE_CHARS].strip()
    base = base + "x" * (MAX_TITLE_CHARS - len(base))
    assert len(base) == MAX_TITLE_CHARS
    titles = [base]
    with store.write() as conn:
        new(conn, "s1", now=1.0, title=base)
        for i in range(2, 13):
            titles.append(compress(conn, f"s{i - 1}", f"s{i}", float(i)))
    assert len(set(titles)) == len(titles)
    for n, title in enumerate(titles[1:], start=2):
        assert len(title) <= MAX_TITLE_CHARS
        assert title.endswith(f" #{n}")
    with store.read() as conn:
        assert lineage.resolve(conn, base).id == "s12"
        assert lineage.newest_in_lineage(conn, base) is not None
        members = lineage.lineage_titles(conn, base)
    assert {m[0] for m in members} == set(titles)


def test_resolve_by_title_picks_the_newest_of_the_lineage(store: Store) -> None:
    with store.write() as conn:
        new(conn, "20240101_000000_aaaaaa", now=1.0, title="my project")
        compress(conn, "20240101_000000_aaaaaa", "20240101_000001_bbbbbb", 2.0)
        compress(conn, "20240101_000001_bbbbbb", "20240101_000002_cccccc", 3.0)
        new(conn, "20240101_000003_dddddd", now=9.0, title="my project notes")
    with store.read() as conn:
        for ref in ["my project", "my project #2", "  my\u200b project ", "MY PROJECT"]:
            assert lineage.resolve(conn, ref).id == "20240101_000002_cccccc", ref


def test_a_lineage_is_parent_links_not_lookalike_titles(store: Store) -> None:
    with store.write() as conn:
        new(conn, "a", now=1.0, title="Zebra notes")
        new(conn, "b", now=5.0, title="Zebra notes #2")  # a user's own name: no parent
        compress(conn, "a", "c", 3.0)  # the real continuation takes the next free number
    with store.read() as conn:
        assert session_rows.require_session(conn, "c").title == "Zebra notes #3"
        assert lineage.resolve(conn, "Zebra notes").id == "c"
        assert lineage.resolve(conn, "Zebra notes #2").id == "b"


def test_a_lineage_whose_first_sessions_are_gone_is_still_found_by_its_name(
    store: Store,
) -> None:
    with store.write() as conn:
        new(conn, "s1", now=1.0, title="trip")
        compress(conn, "s1", "s2", 2.0)
        compress(conn, "s2", "s3", 3.0)
        new(conn, "x", now=9.0, title="trip #9")  # a lookalike, not a continuation
        session_rows.delete_session(conn, "s1")  # pruned: "trip #2" is unparented now
    with store.read() as conn:
        assert lineage.resolve(conn, "trip").id == "s3"


def test_an_auto_title_another_session_holds_takes_a_distinct_form(store: Store) -> None:
    from workers.agent.titles import write_auto_title

    long = "y" * MAX_TITLE_CHARS
    with store.write() as conn:
        new(conn, "a", now=1.0)
        new(conn, "b", now=2.0)
        new(conn, "c", now=3.0)
        new(conn, "d", now=4.0)
        new(conn, "e", now=5.0)
        assert write_auto_title(conn, "a", "Zebra Migration Planning Notes") == (
            "Zebra Migration Planning Notes"
        )
        assert write_auto_title(conn, "b", "Zebra Migration Planning Notes") == (
            "Zebra Migration Planning Notes (2)"
        )
        assert write_auto_title(conn, "c", "Zebra Migration Planning Notes") == (
            "Zebra Migration Planning Notes (3)"
        )
        assert write_auto_title(conn, "d", long) == long
        assert write_auto_title(conn, "e", long) == "y" * (MAX_TITLE_CHARS - 4) + " (2)"
    with store.read() as conn:
        assert lineage.resolve(conn, "Zebra Migration Planning Notes").id == "a"


# --- resolving a session argument ---


@pytest.fixture
def ids(store: Store) -> Iterator[list[str]]:
    made = [
        "20240301_090000_a1b2c3",
        "20240301_090000_a1ffff",
        "20240302_100000_0badcafe",
        "20240303_110000_123456",
    ]
    with store.write() as conn:
        for i, sid in enumerate(made):
            new(conn, sid, now=float(i))
    yield made


def test_exact_id(store: Store, ids: list[str]) -> None:
    with store.read() as conn:
        for sid in ids:
            assert lineage.resolve(conn, sid).id == sid
        assert lineage.resolve(conn, f"  {ids[0]}\n").id == ids[0]


def test_unique_prefix(store: Store, ids: list[str]) -> None:
    with store.read() as conn:
        assert lineage.resolve(conn, "20240302").id == ids[2]
        assert lineage.resolve(conn, "20240301_090000_a1b").id == ids[0]
        assert lineage.resolve(conn, "20240303_1").id == ids[3]


def test_exact_id_beats_a_longer_id_it_prefixes(store: Store) -> None:
    with store.write() as conn:
        new(conn, "20240101_000000_abcdef")
        new(conn, "20240101_000000_abcdef01")
    with store.read() as conn:
        assert lineage.resolve(conn, "20240101_000000_abcdef").id == ("20240101_000000_abcdef")


def test_ambiguous_prefix_lists_the_candidates(store: Store, ids: list[str]) -> None:
    with store.read() as conn, pytest.raises(AmbiguousSession) as caught:
        lineage.resolve(conn, "20240301_090000_a1")
    error = caught.value
    assert not isinstance(error, SessionNotFound)
    assert set(error.candidates) == {ids[0], ids[1]}
    assert ids[0] in str(error)
    assert ids[1] in str(error)
    assert "not found" not in str(error).lower()


def test_many_candidates_are_counted(store: Store) -> None:
    with store.write() as conn:
        for i in range(9):
            new(conn, f"20240401_12000{i}_abcdef")
    with store.read() as conn, pytest.raises(AmbiguousSession) as caught:
        lineage.resolve(conn, "20240401")
    assert "9 sessions" in str(caught.value)
    assert "+4 more" in str(caught.value)
    assert len(caught.value.candidates) == 5


@pytest.mark.parametrize(
    "ref", ["%", "_", "2024%", "%a1b2c3", "20240301_09000_", "________", "2024____", "\\"]
)
def test_like_wildcards_match_nothing(store: Store, ids: list[str], ref: str) -> None:
    with store.read() as conn, pytest.raises(SessionNotFound):
        lineage.resolve(conn, ref)


def test_prefix_comes_before_title(store: Store, ids: list[str]) -> None:
    with store.write() as conn:
        new(conn, "titled", now=99.0, title="20240302")
    with store.read() as conn:
        assert lineage.resolve(conn, "20240302").id == ids[2]
        assert lineage.resolve(conn, "titled").id == "titled"


def test_title_is_the_last_resort(store: Store, ids: list[str]) -> None:
    with store.write() as conn:
        session_rows.set_title(conn, ids[1], "Budget 2024")
    with store.read() as conn:
        assert lineage.resolve(conn, "Budget 2024").id == ids[1]
        with pytest.raises(SessionNotFound, match="Budget 2025"):
            lineage.resolve(conn, "Budget 2025")


@pytest.mark.parametrize("ref", ["", "   ", "\u200b"])
def test_empty_reference_is_not_found(store: Store, ids: list[str], ref: str) -> None:
    with store.read() as conn, pytest.raises(SessionNotFound):
        lineage.resolve(conn, ref)


def test_the_latest_session_skips_only_those_holding_nothing(store: Store) -> None:
    """`hermes -c`: the newest terminal session with a message or a title (on PostgreSQL,
    before revision 0011 counted messages, every untitled session was skipped)."""
    with store.write() as conn:
        new(conn, "titled", now=1.0, title="Named")
        new(conn, "talked", now=2.0)
        append_message(conn, "talked", "user", "an untitled conversation", now=3.0)
        new(conn, "empty", now=4.0)  # a chat that only ran commands
        new(conn, "elsewhere", now=5.0, source="telegram")
        append_message(conn, "elsewhere", "user", "hi", now=5.0)
        latest = resume.latest_session(conn, "cli")
        assert latest is not None and latest.id == "talked"
        resume.drop_if_empty(conn, "talked")
        resume.drop_if_empty(conn, "empty")
        assert session_rows.session_exists(conn, "talked")
        assert not session_rows.session_exists(conn, "empty")
