"""Compression (automatic near the budget, and /compress) and auto-titles, against the fake."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from producers.intake import accept
from shared.db import Store
from shared.pipeline import inbox, outbox
from shared.pipeline.route_sessions import route_session_id
from shared.settings import Settings, load_settings
from shared.store import lineage, messages
from shared.store import sessions as session_rows
from shared.store.resume import lineage_head
from tests.fakes.openai_server import FakeOpenAI, reply, running
from tests.integration.test_agent import AUX, MAIN, model_settings
from tests.pipeline_helpers import make_runtime, turn
from workers.agent.factory import build_agent
from workers.agent.titles import autotitle
from workers.drain import drain
from workers.runtime import Runtime

KEY = "agent:main:cli:dm:c1"


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with running() as server:
        yield server


@pytest.fixture
def small(hermes_env: dict[str, str], fake: FakeOpenAI, store: Store) -> Iterator[Runtime]:
    settings = model_settings(hermes_env, fake, HERMES_MODEL__CONTEXT_TOKENS="1024")
    agent = build_agent(settings, store)
    rt, _ = make_runtime(settings, store, agent)
    yield rt
    rt.renewer.close()
    agent.close()  # type: ignore[attr-defined]


def send(rt: Runtime, n: int, text: str, chat: str = "c1") -> int:
    accepted = accept(
        rt.store, rt.waker, turn(n, chat, text=text), settings=rt.settings, clock=time.time
    )
    drain(rt, accepted.session_key)
    return accepted.turn_id


def replies(store: Store, turn_id: int) -> list[str]:
    with store.read() as conn:
        return [r.text for r in outbox.for_turn(conn, turn_id)]


def test_near_the_budget_a_continuation_takes_over_with_the_lineage_title(
    small: Runtime, fake: FakeOpenAI
) -> None:
    rt = small
    send(rt, 0, "/title my project")
    with rt.store.read() as conn:
        old_id = route_session_id(conn, KEY)
    assert old_id is not None
    fake.script(reply("Sure, step one is the schema.", usage=(900, 50)), model=MAIN)
    fake.script(reply("The user plans a project; step one is the schema."), model=AUX)
    answered = send(rt, 1, "let's plan the project")
    assert replies(rt.store, answered) == ["Sure, step one is the schema."]
    with rt.store.read() as conn:
        old = session_rows.require_session(conn, old_id)
        new_id = route_session_id(conn, KEY)
        assert new_id is not None and new_id != old_id
        new = session_rows.require_session(conn, new_id)
        first = messages.transcript(conn, new_id)
        assert lineage_head(conn, old).id == new_id
        assert lineage.newest_in_lineage(conn, "my project") == new
    assert (old.end_reason, old.title) == ("compression", "my project")
    assert (new.parent_session_id, new.title, new.title_source) == (
        old_id,
        "my project #2",
        "derived",
    )
    assert new.ended_at is None and new.source == "cli" and new.session_key == KEY
    assert [m.role for m in first] == ["system"]
    assert "step one is the schema" in (first[0].content or "")
    (summary_request,) = fake.chats(AUX)
    assert "let's plan the project" in summary_request.text()

    later = send(rt, 2, "what was step one?")
    assert replies(rt.store, later) == ["echo: what was step one?"]
    request = fake.chats(MAIN)[-1]
    assert "The user plans a project" in request.messages[0]["content"]  # summary in the prompt
    assert [m["role"] for m in request.messages] == ["system", "user"]
    with rt.store.read() as conn:
        row = inbox.get_turn(conn, later)
    assert row is not None and row.session_id == new_id


def test_slash_compress_summarises_on_request(small: Runtime, fake: FakeOpenAI) -> None:
    rt = small
    short = send(rt, 0, "/compress")
    assert replies(rt.store, short) == ["Nothing to compress yet: this session is short."]
    send(rt, 1, "first question")
    send(rt, 2, "second question")
    fake.script(reply("Two questions were asked."), model=AUX)
    done = send(rt, 3, "/compress")
    (text,) = replies(rt.store, done)
    with rt.store.read() as conn:
        new_id = route_session_id(conn, KEY)
        assert new_id is not None
        new = session_rows.require_session(conn, new_id)
    assert text.startswith("Compressed 4 messages into a summary. Continuing in session")
    assert new.id in text and new.parent_session_id is not None


def test_auto_title_after_the_first_exchange_once_distinct_on_collision(
    small: Runtime, fake: FakeOpenAI
) -> None:
    rt = small
    waker = rt.waker
    first = send(rt, 1, "I want to plan a trip to Lisbon in May")
    with rt.store.read() as conn:
        session_id = route_session_id(conn, KEY)
    assert session_id is not None
    assert waker.autotitles == [session_id]  # type: ignore[attr-defined]
    assert replies(rt.store, first)  # the reply did not wait for a title
    fake.script(reply('Title: "Trip to Lisbon in May."'), model=AUX)
    assert autotitle(rt, session_id) == "titled 'Trip to Lisbon in May'"
    assert autotitle(rt, session_id) == "already titled"
    send(rt, 2, "and hotels?")
    assert waker.autotitles == [session_id]  # type: ignore[attr-defined]  # once

    send(rt, 1, "Lisbon again, for a friend", chat="c2")
    other = waker.autotitles[-1]  # type: ignore[attr-defined]
    fake.script(reply("Trip to Lisbon in May"), model=AUX)
    autotitle(rt, other)
    with rt.store.read() as conn:
        titled = session_rows.require_session(conn, session_id)
        second = session_rows.require_session(conn, other)
    assert (titled.title, titled.title_source) == ("Trip to Lisbon in May", "auto")
    assert (second.title, second.title_source) == ("Trip to Lisbon in May (2)", "auto")
    (title_request, _) = fake.chats(AUX)
    assert "same language" in title_request.messages[0]["content"]


def test_a_named_session_is_not_auto_titled(small: Runtime, fake: FakeOpenAI) -> None:
    rt = small
    send(rt, 0, "/title Hand-picked name")
    send(rt, 1, "hello")
    assert rt.waker.autotitles == []  # type: ignore[attr-defined]
    with rt.store.read() as conn:
        session_id = route_session_id(conn, KEY)
    assert session_id is not None
    assert autotitle(rt, session_id) == "already titled"
    assert fake.chats(AUX) == []


def test_offline_auto_title_is_a_heuristic_from_the_first_message(
    hermes_env: dict[str, str], store: Store
) -> None:
    settings: Settings = load_settings(hermes_env)
    agent = build_agent(settings, store)
    rt, waker = make_runtime(settings, store, agent)
    try:
        send(rt, 1, "how do I rotate the nginx logs every night, please?")
        # A heuristic has nothing to wait for: the title comes with the first exchange's write.
        assert waker.autotitles == []
        with rt.store.read() as conn:
            session_id = route_session_id(conn, KEY)
            assert session_id is not None
            titled = session_rows.require_session(conn, session_id)
        assert (titled.title, titled.title_source) == ("How do I rotate the nginx logs", "auto")
        assert titled.message_count == 2
        assert autotitle(rt, session_id) == "already titled"
        send(rt, 2, "hi", chat="c2")  # nothing to go on yet: left for the title sweep
        with rt.store.read() as conn:
            fresh = route_session_id(conn, "agent:main:cli:dm:c2")
            assert fresh is not None
            assert session_rows.require_session(conn, fresh).title is None
    finally:
        rt.renewer.close()
