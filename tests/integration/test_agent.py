"""The agent through the drain against a fake OpenAI-compatible server (real HTTP, real SDK).

Tool calls, usage tokens, 429 then success, a persistent 500, the model snapshot, memory
across sessions and the session_search tool.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import select

from producers.intake import accept
from shared.db import Store
from shared.db.schema import inbox as inbox_table
from shared.pipeline import inbox, outbox
from shared.pipeline.route_sessions import route_session_id
from shared.settings import Settings, load_settings
from shared.store import memory as memory_rows
from shared.store import messages
from shared.store import sessions as session_rows
from tests.fakes.openai_server import FakeOpenAI, error, reply, running, tool_call
from tests.pipeline_helpers import make_runtime, turn
from workers.agent.factory import build_agent
from workers.drain import drain
from workers.runtime import Runtime

pytestmark = pytest.mark.both_databases

MAIN = "main-model"
AUX = "aux-model"


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with running() as server:
        yield server


def model_settings(env: dict[str, str], fake: FakeOpenAI, **extra: str) -> Settings:
    return load_settings(
        {
            **env,
            "HERMES_MODEL__BASE_URL": fake.url,
            "HERMES_MODEL__API_KEY": "sk-test-not-secret",
            "HERMES_MODEL__NAME": MAIN,
            "HERMES_MODEL__RETRIES": "2",
            "HERMES_MODEL__RETRY_BACKOFF_SECONDS": "0",
            "HERMES_AUXILIARY__NAME": AUX,
            "HERMES_PIPELINE__RETRY_BACKOFF_SECONDS": "0",
            **extra,
        }
    )


@pytest.fixture
def agent_runtime(
    hermes_env: dict[str, str], fake: FakeOpenAI, store: Store
) -> Iterator[tuple[Runtime, Settings]]:
    settings = model_settings(hermes_env, fake)
    agent = build_agent(settings, store)
    rt, _ = make_runtime(settings, store, agent)
    yield rt, settings
    rt.renewer.close()
    agent.close()  # type: ignore[attr-defined]


def run(rt: Runtime, settings: Settings, n: int, chat: str = "c1", **extra: object) -> int:
    accepted = accept(
        rt.store, rt.waker, turn(n, chat, **extra), settings=settings, clock=time.time
    )
    drain(rt, accepted.session_key)
    return accepted.turn_id


def session_of(store: Store, turn_id: int) -> str:
    with store.read() as conn:
        row = inbox.get_turn(conn, turn_id)
        assert row is not None and row.session_id is not None
        return row.session_id


def sent_for(store: Store, turn_id: int) -> list[str]:
    with store.read() as conn:
        return [r.text for r in outbox.for_turn(conn, turn_id)]


def test_tool_call_loop_usage_tokens_and_model_snapshot(
    agent_runtime: tuple[Runtime, Settings], fake: FakeOpenAI
) -> None:
    rt, settings = agent_runtime
    fake.script(
        tool_call("memory", {"action": "save", "content": "The user drinks green tea."}),
        reply("Noted: green tea.", usage=(50, 9)),
        model=MAIN,
    )
    turn_id = run(rt, settings, 1, text="remember that I drink green tea")
    assert sent_for(rt.store, turn_id) == ["Noted: green tea."]
    session_id = session_of(rt.store, turn_id)
    with rt.store.read() as conn:
        transcript = messages.transcript(conn, session_id)
        session = session_rows.require_session(conn, session_id)
        notes = memory_rows.list_notes(conn, "cli:u1")
    assert [m.role for m in transcript] == ["user", "assistant", "tool", "assistant"]
    call = transcript[1].tool_call_list[0]
    assert call["function"]["name"] == "memory"
    assert transcript[2].tool_call_id == call["id"] and transcript[2].tool_name == "memory"
    assert "saved" in (transcript[2].content or "")
    assert transcript[3].content == "Noted: green tea." and transcript[3].token_count == 9
    # usage from the endpoint, summed over both calls (fake default usage is 20/5 for the call)
    assert (session.input_tokens, session.output_tokens) == (20 + 50, 5 + 9)
    assert session.model == MAIN
    config = json.loads(session.model_config or "{}")
    assert config["base_url"] == fake.url and config["model"] == MAIN
    assert "sk-test" not in (session.model_config or "")
    assert session.system_prompt and "session_search" in session.system_prompt
    assert [n.content for n in notes] == ["The user drinks green tea."]
    # the second request carried the tool result back; the first streamed with usage asked for
    first, second = fake.chats(MAIN)
    assert first.body["stream"] is True and first.body["stream_options"] == {"include_usage": True}
    assert {t["function"]["name"] for t in first.body["tools"]} == {"memory", "session_search"}
    assert second.messages[-1]["role"] == "tool" and "saved" in second.messages[-1]["content"]
    assert first.headers["authorization"] == "Bearer sk-test-not-secret"


def test_memory_and_search_reach_a_later_session(
    agent_runtime: tuple[Runtime, Settings], fake: FakeOpenAI
) -> None:
    rt, settings = agent_runtime
    fake.script(
        tool_call("memory", {"action": "save", "content": "Works on the zeppelin project."}),
        reply("Saved."),
        model=MAIN,
    )
    first = run(rt, settings, 1, text="I work on the zeppelin project")
    fake.script(tool_call("session_search", {"query": "zeppelin"}), reply("Found it."), model=MAIN)
    later = run(rt, settings, 2, chat="c2", text="what was my project again?")
    assert sent_for(rt.store, later) == ["Found it."]
    request = fake.chats(MAIN)[2]
    system = request.messages[0]["content"]
    assert "Works on the zeppelin project." in system  # memory shown in a later session
    result = json.loads(fake.chats(MAIN)[3].messages[-1]["content"])
    assert result["mode"] == "discover" and result["count"] == 1
    assert result["results"][0]["session_id"] == session_of(rt.store, first)


def test_search_leaves_out_the_current_session_even_when_it_holds_the_term(
    agent_runtime: tuple[Runtime, Settings], fake: FakeOpenAI
) -> None:
    rt, settings = agent_runtime
    fake.script(reply("Noted."), model=MAIN)
    first = run(rt, settings, 1, text="the albatross migration is on hold")
    fake.script(reply("Let me look."), model=MAIN)
    earlier = run(
        rt, settings, 2, chat="c2", text="what did I say about the albatross, the quokka?"
    )
    current = session_of(rt.store, earlier)
    with rt.store.read() as conn:  # the current session holds both terms before the search
        assert "albatross" in (messages.transcript(conn, current)[0].content or "")
    fake.script(tool_call("session_search", {"query": "albatross"}), reply("Found it."), model=MAIN)
    later = run(rt, settings, 3, chat="c2", text="search for it")
    assert session_of(rt.store, later) == current != session_of(rt.store, first)
    result = json.loads(fake.chats(MAIN)[3].messages[-1]["content"])
    assert [r["session_id"] for r in result["results"]] == [session_of(rt.store, first)]
    # A term only the current session holds finds nothing, with a note (never a silent []).
    fake.script(tool_call("session_search", {"query": "quokka"}), reply("Nothing."), model=MAIN)
    run(rt, settings, 4, chat="c2", text="and the other animal?")
    nothing = json.loads(fake.chats(MAIN)[5].messages[-1]["content"])
    assert nothing["count"] == 0 and nothing["note"]


def test_search_from_a_platform_reaches_only_the_senders_sessions(
    agent_runtime: tuple[Runtime, Settings], fake: FakeOpenAI
) -> None:
    rt, settings = agent_runtime
    fake.script(reply("Noted."), model=MAIN)
    cli_turn = run(rt, settings, 1, text="the albatross from the terminal")
    fake.script(reply("Noted."), model=MAIN)
    other = run(rt, settings, 1, chat="t2", platform="telegram", user_id="u2", text="albatross u2")
    fake.script(reply("Noted."), model=MAIN)
    mine = run(rt, settings, 1, chat="t1", platform="telegram", text="albatross is mine")
    fake.script(tool_call("session_search", {"query": "albatross"}), reply("Found."), model=MAIN)
    run(rt, settings, 2, chat="t1b", platform="telegram", text="find my bird")
    result = json.loads(fake.chats(MAIN)[4].messages[-1]["content"])
    assert [r["session_id"] for r in result["results"]] == [session_of(rt.store, mine)]
    assert session_of(rt.store, other) not in json.dumps(result)
    assert session_of(rt.store, cli_turn) not in json.dumps(result)


def test_rate_limit_then_success(agent_runtime: tuple[Runtime, Settings], fake: FakeOpenAI) -> None:
    rt, settings = agent_runtime
    fake.script(error(429, "slow down", retry_after="0"), reply("here you go"), model=MAIN)
    turn_id = run(rt, settings, 1)
    assert sent_for(rt.store, turn_id) == ["here you go"]
    assert len(fake.chats(MAIN)) == 2
    with rt.store.read() as conn:
        row = inbox.get_turn(conn, turn_id)
    assert row is not None and (row.status, row.attempts) == ("done", 1)


def test_persistent_500_fails_the_turn_with_a_clear_reply_and_keeps_the_message(
    agent_runtime: tuple[Runtime, Settings], fake: FakeOpenAI
) -> None:
    rt, settings = agent_runtime
    fake.always = error(500, "upstream exploded")
    turn_id = run(rt, settings, 1, text="are you there?")
    (apology,) = sent_for(rt.store, turn_id)
    assert "can't reach the model" in apology and "main-model" in apology
    assert "HTTP 500: upstream exploded" in apology and "3 attempts" in apology
    assert "Your message is saved" in apology
    assert len(fake.chats(MAIN)) == 3  # 1 + model.retries, then no retry loop
    session_id = session_of(rt.store, turn_id)
    with rt.store.read() as conn:
        row = inbox.get_turn(conn, turn_id)
        transcript = messages.transcript(conn, session_id)
    assert row is not None and row.status == "failed" and row.attempts == 1
    assert row.error and "model unreachable" in row.error
    assert [(m.role, m.content) for m in transcript] == [("user", "are you there?")]
    accepted_key = row.session_key
    assert drain(rt, accepted_key).ran == 0  # nothing left to retry
    fake.always = None
    again = run(rt, settings, 2, text="and now?")
    assert sent_for(rt.store, again) == ["echo: and now?"]


def test_a_refused_request_is_a_clear_failure_not_a_retry(
    agent_runtime: tuple[Runtime, Settings], fake: FakeOpenAI
) -> None:
    rt, settings = agent_runtime
    fake.script(error(401, "invalid api key"), model=MAIN)
    turn_id = run(rt, settings, 1)
    (text,) = sent_for(rt.store, turn_id)
    assert "refused" in text and "invalid api key" in text
    assert len(fake.chats(MAIN)) == 1
    with rt.store.read() as conn:
        status = conn.execute(
            select(inbox_table.c.status).where(inbox_table.c.id == turn_id)
        ).scalar_one()
    assert status == "failed"


def test_endpoint_without_streaming_falls_back_to_whole_responses(
    agent_runtime: tuple[Runtime, Settings], fake: FakeOpenAI
) -> None:
    rt, settings = agent_runtime

    def refuse_stream(body: dict[str, object]):  # type: ignore[no-untyped-def]
        if body.get("stream"):
            return error(400, "stream is not supported by this server")
        return reply("whole answer")

    fake.script(refuse_stream, refuse_stream, model=MAIN)
    turn_id = run(rt, settings, 1)
    assert sent_for(rt.store, turn_id) == ["whole answer"]
    assert [r.body.get("stream") for r in fake.chats(MAIN)] == [True, None]
    later = run(rt, settings, 2)
    assert sent_for(rt.store, later) == ["echo: message 2"]
    assert fake.chats(MAIN)[-1].body.get("stream") is None  # remembered for the process
    with rt.store.read() as conn:
        assert route_session_id(conn, "agent:main:cli:dm:c1") == session_of(rt.store, later)
