"""Agent gaps: compression past the history cap (against the fake endpoint), the offline title
heuristic, and its fallback once a session has gone quiet (so the title sweep stops asking)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from producers.intake import accept
from shared.db import Store
from shared.pipeline import outbox
from shared.pipeline.route_sessions import route_session_id
from shared.settings import load_settings
from shared.store import messages
from shared.store import sessions as session_rows
from tests.fakes.openai_server import FakeOpenAI, reply, running
from tests.integration.test_agent import AUX, MAIN, model_settings
from tests.pipeline_helpers import make_runtime, turn
from workers.agent.auxiliary import heuristic_title
from workers.agent.factory import build_agent
from workers.agent.titles import QUIET_SECONDS, autotitle
from workers.drain import HISTORY_MESSAGES, drain
from workers.runtime import Runtime
from workers.sweeps import titles as title_sweep

pytestmark = pytest.mark.both_databases

KEY = "agent:main:cli:dm:c1"


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with running() as server:
        yield server


def send(rt: Runtime, n: int, text: str, chat: str = "c1") -> int:
    accepted = accept(
        rt.store, rt.waker, turn(n, chat, text=text), settings=rt.settings, clock=time.time
    )
    drain(rt, accepted.session_key)
    return accepted.turn_id


def session_of(rt: Runtime, chat: str = "c1") -> str:
    with rt.store.read() as conn:
        session_id = route_session_id(conn, f"agent:main:cli:dm:{chat}")
    assert session_id is not None
    return session_id


@pytest.mark.both_databases  # the count that shows the cap was 0 on PostgreSQL before 0011
def test_a_session_longer_than_the_history_window_is_compressed(
    hermes_env: dict[str, str], fake: FakeOpenAI, store: Store
) -> None:
    settings = model_settings(hermes_env, fake)  # 32k tokens: far from the token threshold
    agent = build_agent(settings, store)
    rt, _ = make_runtime(settings, store, agent)
    try:
        send(rt, 0, "the first thing I said")
        old_id = session_of(rt)
        with rt.store.write() as conn:  # a long, short-worded conversation
            for n in range(HISTORY_MESSAGES):
                role = "user" if n % 2 == 0 else "assistant"
                messages.append_message(conn, old_id, role, f"chat {n}", now=time.time())
        fake.script(reply("Noted."), model=MAIN)
        fake.script(reply("They talked about many small things."), model=AUX)
        answered = send(rt, 1, "what did I say first?")
        with rt.store.read() as conn:
            assert [r.text for r in outbox.for_turn(conn, answered)] == ["Noted."]
            old = session_rows.require_session(conn, old_id)
            new_id = route_session_id(conn, KEY)
            assert new_id is not None and new_id != old_id
            new = session_rows.require_session(conn, new_id)
            carried = messages.transcript(conn, new_id)
        assert old.end_reason == "compression" and new.parent_session_id == old_id
        (summary,) = carried
        assert summary.role == "system" and f"{HISTORY_MESSAGES + 4} messages" in str(
            summary.content
        )
        assert str(summary.content).endswith("They talked about many small things.")
        sent = fake.chats(MAIN)[-1].messages
        said = " ".join(str(m.get("content")) for m in sent)
        assert "the first thing I said" not in said  # it was past the window: hence the summary
        summarised = fake.chats(AUX)[-1].messages[-1]["content"]
        assert "the first thing I said" in summarised
    finally:
        rt.renewer.close()
        agent.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ("hi! I'm new here - what can you do?", "I'm new here"),
        ("hey, quick question: how do I reset my router?", "How do I reset my router"),
        ("Hello there, can you help me plan a trip to Oslo, Norway", "Can you help me plan a trip"),
        ("how do I rotate the nginx logs every night, please?", "How do I rotate the nginx logs"),
        ("there is a bug in my parser", "There is a bug in my parser"),
        ("good morning. quick q. oslo weather?", "Quick q oslo weather"),
        ("東京の天気を教えてください", "東京の天気を教えてください"),
        ("hi", None),
        ("Hello!", None),
        ("good morning, thanks", None),
        ("oslo weather", None),
        ("see https://example.com/a/b/c", None),
    ],
)
def test_offline_title_heuristic(text: str, title: str | None) -> None:
    assert heuristic_title(text) == title


def test_offline_auto_title_waits_for_words_then_falls_back_so_the_sweep_stops(
    hermes_env: dict[str, str], store: Store
) -> None:
    late = [0.0]
    settings = load_settings(hermes_env)
    rt, waker = make_runtime(settings, store, clock=lambda: time.time() + late[0])
    try:
        send(rt, 1, "hi", chat="c1")
        send(rt, 2, "hello", chat="c2")
        send(rt, 3, "plan a trip to Oslo in May", chat="c2")
        greeted, planned = session_of(rt, "c1"), session_of(rt, "c2")
        assert autotitle(rt, greeted) == "nothing to title it with yet"  # fresh: left untitled
        late[0] = QUIET_SECONDS + 1  # the sweep's turn: the session has been quiet a minute
        assert set(title_sweep.sweep(rt)) == {greeted, planned}
        assert autotitle(rt, planned) == "titled 'Plan a trip to Oslo in May'"
        assert autotitle(rt, greeted) == "titled 'Hi'"
        assert title_sweep.sweep(rt) == []  # nothing left to ask about again
        assert waker.autotitles
    finally:
        rt.renewer.close()
