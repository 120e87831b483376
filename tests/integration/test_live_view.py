"""The live view: while the model streams, the worker publishes the reply's growing text and
its tool rounds on the turn's Redis channel; the committed transcript is unchanged by it.

Real Redis, the real drain, the real OpenAI SDK against the fake server.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator

import pytest
import redis

from producers.intake import accept
from shared.db import Store
from shared.live import DONE, STATUS, TEXT, LiveEvent, channel_for, decode
from shared.pipeline import outbox
from shared.settings import Settings, load_settings
from tests.fakes.openai_server import FakeOpenAI, Step, running, tool_call
from tests.pipeline_helpers import make_runtime, transcript_of, turn
from workers.agent.factory import build_agent
from workers.drain import drain
from workers.live import RedisLive
from workers.runtime import Runtime

pytestmark = pytest.mark.both_databases

REPLY = "Here is a long answer that arrives in many small pieces, one after another."


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with running() as server:
        yield server


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def _settings(env: dict[str, str], fake: FakeOpenAI) -> Settings:
    return load_settings(
        {
            **env,
            "HERMES_MODEL__BASE_URL": fake.url,
            "HERMES_MODEL__API_KEY": "sk-test-not-secret",
            "HERMES_MODEL__NAME": "main-model",
            "HERMES_MODEL__RETRIES": "0",
            "HERMES_AUXILIARY__NAME": "aux-model",
        }
    )


def _run(rt: Runtime, settings: Settings) -> tuple[int, str]:
    accepted = accept(rt.store, rt.waker, turn(1, "c1"), settings=settings, clock=time.time)
    drain(rt, accepted.session_key)
    return accepted.turn_id, accepted.session_key


def _events(pubsub: redis.client.PubSub) -> list[tuple[str, LiveEvent]]:
    out = []
    quiet_until = time.monotonic() + 0.5
    while time.monotonic() < quiet_until:
        message = pubsub.get_message(timeout=0.1)  # None too for the subscribe confirmation
        if message is None:
            continue
        quiet_until = time.monotonic() + 0.5
        event = decode(message["data"])
        assert event is not None, message
        out.append((message["channel"].decode(), event))
    return out


def test_the_worker_publishes_the_growing_reply_and_tool_rounds(
    hermes_env: dict[str, str], fake: FakeOpenAI, store: Store, client: redis.Redis
) -> None:
    settings = _settings(hermes_env, fake)
    agent = build_agent(settings, store)
    rt, _ = make_runtime(settings, store, agent)
    rt = dataclasses.replace(rt, redis=client)
    fake.script(
        tool_call("session_search", {"query": "pieces"}),
        Step(content=REPLY, chunk_size=4, chunk_delay=0.01),
    )
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.psubscribe("hermes:live:*")
    try:
        turn_id, key = _run(rt, settings)
        events = _events(pubsub)
    finally:
        pubsub.close()
        rt.renewer.close()
        agent.close()  # type: ignore[attr-defined]

    assert {channel for channel, _ in events} == {channel_for(turn_id)}
    kinds = [e.kind for _, e in events]
    assert kinds[0] == STATUS and events[0][1].text == "searching past sessions…"
    assert kinds[-1] == DONE and kinds.count(DONE) == 1
    texts = [e.text for _, e in events if e.kind == TEXT]
    assert len(texts) >= 2  # it grew in view, not in one piece
    assert all(REPLY.startswith(t) for t in texts)
    assert texts[-1] == REPLY
    with store.read() as conn:
        sent = [r.text for r in outbox.for_turn(conn, turn_id)]
    assert sent == [REPLY]
    assert [c for _, c in transcript_of(store, key)].count(REPLY) == 1


def test_a_lost_live_view_costs_nothing_but_the_view(
    hermes_env: dict[str, str], fake: FakeOpenAI, store: Store
) -> None:
    settings = _settings(hermes_env, fake)
    agent = build_agent(settings, store)
    rt, _ = make_runtime(settings, store, agent)
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    rt = dataclasses.replace(rt, redis=dead)
    fake.script(Step(content=REPLY, chunk_size=4))
    try:
        turn_id, _ = _run(rt, settings)
    finally:
        rt.renewer.close()
        agent.close()  # type: ignore[attr-defined]
    with store.read() as conn:
        assert [r.text for r in outbox.for_turn(conn, turn_id)] == [REPLY]


def test_publishes_are_bounded_and_the_last_text_is_never_dropped(client: redis.Redis) -> None:
    now = [0.0]
    live = RedisLive(client, 7, per_second=20, clock=lambda: now[0])
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(channel_for(7))
    try:
        text = ""
        for n in range(200):  # 200 tokens in one second
            text += f"w{n} "
            live.text(text)
            now[0] += 0.005
        live.done()
        events = [e for _, e in _events(pubsub)]
    finally:
        pubsub.close()
    texts = [e.text for e in events if e.kind == TEXT]
    assert len(texts) <= 20 + 1
    assert texts[-1] == text
    assert events[-1].kind == DONE
