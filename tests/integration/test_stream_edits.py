"""Progressive replies (`platforms.<p>.stream_edits`): the real drain and agent (the fake OpenAI
server streaming slowly), the real senders (python-telegram-bot, slack-sdk, httpx for Discord)
against the fake platforms, real Redis. One message is posted early and edited at the
configured pace; the committed reply finishes it, so the chat shows the transcript's text once;
a reply over the platform's limit ends as the edited first part plus new messages."""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

from producers.intake import accept
from shared.db import Store, open_store
from shared.platforms import registry
from shared.settings import Settings, load_settings
from tests.fakes.delivery import delivery_runtime
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.openai_server import FakeOpenAI, Step, running
from tests.fakes.slack_api import FakeSlack
from tests.fakes.stack import redis_db_url
from tests.fakes.telegram_api import FakeTelegram
from tests.pipeline_helpers import turn
from workers.agent.factory import build_agent
from workers.delivery.split import split_for
from workers.drain import drain
from workers.flush import flush

pytestmark = pytest.mark.both_databases

TG_TOKEN = "123456789:AAFakeTokenForTestsSecretPart"
SLACK_TOKEN = "xoxb-fake-slack-token-for-tests"
DISCORD_TOKEN = "OTAw.fake-discord-token.SecretPart"
INTERVAL = 0.4
# ~3 s of writing: 24 chunks of 5 characters, 0.12 s apart
REPLY = "Streaming arrives word by word, edited into one message until the final text lands."


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    with running() as server:
        yield server


def _settings(
    hermes_env: dict[str, str], redis_url: str, model: FakeOpenAI, **extra: str
) -> Settings:
    return load_settings(
        {
            **hermes_env,
            "HERMES_BROKER_URL": redis_db_url(redis_url),
            "HERMES_MODEL__BASE_URL": model.url,
            "HERMES_MODEL__API_KEY": "sk-test-not-secret",
            "HERMES_MODEL__NAME": "main-model",
            "HERMES_MODEL__RETRIES": "0",
            "HERMES_AUXILIARY__NAME": "aux-model",
            **extra,
        }
    )


def _run_turn(settings: Settings, platform: str, chat: str, said: str = "hello") -> list[str]:
    """One turn through drain and flush; the assistant messages the transcript holds."""
    store = open_store(settings.resolved_database_url)
    agent = build_agent(settings, store)
    try:
        with delivery_runtime(settings, store) as (rt, _):
            rt = dataclasses.replace(rt, agent=agent)
            inbound = turn(1, chat, platform=platform, text=said)
            accepted = accept(store, rt.waker, inbound, settings=settings, clock=time.time)
            drain(rt, accepted.session_key)
            deadline = time.monotonic() + 30
            while flush(rt, f"{platform}:{chat}").reason != "idle":
                assert time.monotonic() < deadline
                time.sleep(0.1)
        return _assistant_texts(store)
    finally:
        agent.close()  # type: ignore[attr-defined]
        store.close()


def _assistant_texts(store: Store) -> list[str]:
    with store.read() as conn:
        rows = conn.execute(text("SELECT content FROM messages WHERE role = 'assistant'"))
        return [str(r[0]) for r in rows]


def _gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


def test_telegram_edits_one_message_at_the_configured_pace_and_ends_with_the_transcript(
    hermes_env: dict[str, str], redis_url: str, model: FakeOpenAI
) -> None:
    chat = "4242"
    with FakeTelegram(TG_TOKEN) as bot:
        settings = _settings(
            hermes_env,
            redis_url,
            model,
            HERMES_PLATFORMS__TELEGRAM__TOKEN=TG_TOKEN,
            HERMES_PLATFORMS__TELEGRAM__API_BASE=bot.api_base,
            HERMES_PLATFORMS__TELEGRAM__STREAM_EDITS="true",
            HERMES_PLATFORMS__TELEGRAM__STREAM_EDIT_INTERVAL=str(INTERVAL),
        )
        model.script(Step(content=REPLY, chunk_size=5, chunk_delay=0.12))
        transcript = _run_turn(settings, "telegram", chat)
        posts = [c for c in bot.calls if c.method == "sendMessage" and c.params.get("_ok")]
        edits = list(bot.edits)
        shown = bot.shown(chat)
    assert transcript == [REPLY]
    assert len(posts) == 1  # posted once, early, and only edited after that
    assert shown == [REPLY]  # what the user sees is the committed reply, once
    streamed = [str(posts[0].params["text"])] + [str(e.params["text"]) for e in edits[:-1]]
    assert len(streamed) >= 3, streamed  # it grew on screen while the model wrote
    assert all(REPLY.startswith(part) and part != REPLY for part in streamed[:-1])
    assert edits[-1].params["text"] == REPLY
    times = [posts[0].at] + [e.at for e in edits]
    assert min(_gaps(times[:-1])) >= INTERVAL * 0.9  # the pace; the final edit comes at once


def test_slack_updates_the_streamed_message_and_finishes_it(
    hermes_env: dict[str, str], redis_url: str, model: FakeOpenAI
) -> None:
    channel = "D0123456789"
    with FakeSlack(SLACK_TOKEN) as slack:
        settings = _settings(
            hermes_env,
            redis_url,
            model,
            HERMES_PLATFORMS__SLACK__TOKEN=SLACK_TOKEN,
            HERMES_PLATFORMS__SLACK__SIGNING_SECRET="not-used-here",
            HERMES_PLATFORMS__SLACK__API_BASE=slack.api_base,
            HERMES_PLATFORMS__SLACK__STREAM_EDITS="true",
            HERMES_PLATFORMS__SLACK__STREAM_EDIT_INTERVAL=str(INTERVAL),
        )
        model.script(Step(content=REPLY, chunk_size=5, chunk_delay=0.12))
        transcript = _run_turn(settings, "slack", channel)
        posts = slack.sent("chat.postMessage")
        updates = [c for c in slack.calls if c.method == "chat.update" and c.ok]
        shown = slack.shown(channel)
    assert transcript == [REPLY]
    assert len(posts) == 1
    assert len(updates) >= 2
    assert shown == [REPLY]
    gaps = _gaps([u.at for u in updates[:-1]])
    assert not gaps or min(gaps) >= INTERVAL * 0.9


def test_discord_a_long_reply_ends_as_the_edited_first_part_and_new_messages(
    hermes_env: dict[str, str], redis_url: str, model: FakeOpenAI
) -> None:
    channel = "1300000000000000042"
    long_reply = " ".join(f"word{n:04d}" for n in range(330))  # ~3,300 characters: two parts
    with FakeDiscord(DISCORD_TOKEN) as discord:
        settings = _settings(
            hermes_env,
            redis_url,
            model,
            HERMES_PLATFORMS__DISCORD__TOKEN=DISCORD_TOKEN,
            HERMES_PLATFORMS__DISCORD__API_BASE=discord.api_base,
            HERMES_PLATFORMS__DISCORD__STREAM_EDITS="true",
            HERMES_PLATFORMS__DISCORD__STREAM_EDIT_INTERVAL=str(INTERVAL),
        )
        model.script(Step(content=long_reply, chunk_size=120, chunk_delay=0.08))
        transcript = _run_turn(settings, "discord", channel)
        posts = discord.sent(channel)
        edits = list(discord.edits)
        shown = discord.shown(channel)
    parts = split_for(registry.get("discord"), long_reply)
    assert transcript == [long_reply] and len(parts) == 2
    assert shown == parts  # the streamed message became part one; part two is new
    assert len(posts) == 2
    assert len(edits) >= 1 and all(len(e.body["content"]) <= 2000 for e in edits)


def test_stream_edits_off_sends_the_reply_once_without_edits(
    hermes_env: dict[str, str], redis_url: str, model: FakeOpenAI
) -> None:
    chat = "4243"
    with FakeTelegram(TG_TOKEN) as bot:
        settings = _settings(
            hermes_env,
            redis_url,
            model,
            HERMES_PLATFORMS__TELEGRAM__TOKEN=TG_TOKEN,
            HERMES_PLATFORMS__TELEGRAM__API_BASE=bot.api_base,
        )
        model.script(Step(content=REPLY, chunk_size=5, chunk_delay=0.05))
        _run_turn(settings, "telegram", chat)
        methods: list[Any] = bot.methods()
        shown = bot.shown(chat)
    assert "editMessageText" not in methods
    assert shown == [REPLY]


def test_a_streamed_message_the_user_deleted_is_replaced_by_a_new_one(
    hermes_env: dict[str, str], redis_url: str, model: FakeOpenAI
) -> None:
    chat = "4244"
    with FakeTelegram(TG_TOKEN) as bot:
        settings = _settings(
            hermes_env,
            redis_url,
            model,
            HERMES_PLATFORMS__TELEGRAM__TOKEN=TG_TOKEN,
            HERMES_PLATFORMS__TELEGRAM__API_BASE=bot.api_base,
            HERMES_PLATFORMS__TELEGRAM__STREAM_EDITS="true",
            HERMES_PLATFORMS__TELEGRAM__STREAM_EDIT_INTERVAL=str(INTERVAL),
        )
        model.script(Step(content=REPLY, chunk_size=5, chunk_delay=0.12))
        original = bot._edit

        def deleting(params: dict[str, Any]) -> Any:
            with bot._lock:  # the user deletes the message before the bot edits it
                bot.messages.pop((str(params.get("chat_id")), int(params["message_id"])), None)
            return original(params)

        bot._edit = deleting  # type: ignore[method-assign]
        transcript = _run_turn(settings, "telegram", chat)
        shown = bot.shown(chat)
    assert transcript == [REPLY]
    assert shown == [REPLY]  # the final reply was posted anew, once


def test_slack_assistant_thread_shows_its_status_while_the_turn_runs(
    hermes_env: dict[str, str], redis_url: str, model: FakeOpenAI
) -> None:
    channel, thread = "D0123456789", "1767225600.000100"
    with FakeSlack(SLACK_TOKEN) as slack:
        settings = _settings(
            hermes_env,
            redis_url,
            model,
            HERMES_PLATFORMS__SLACK__TOKEN=SLACK_TOKEN,
            HERMES_PLATFORMS__SLACK__SIGNING_SECRET="not-used-here",
            HERMES_PLATFORMS__SLACK__API_BASE=slack.api_base,
            HERMES_PLATFORMS__SLACK__ASSISTANT_STATUS="true",
        )
        model.script(Step(content=REPLY, chunk_size=5, chunk_delay=0.05))
        store = open_store(settings.resolved_database_url)
        agent = build_agent(settings, store)
        try:
            with delivery_runtime(settings, store) as (rt, _):
                rt = dataclasses.replace(rt, agent=agent)
                for n, where in enumerate((thread, None)):  # an assistant thread, then the DM
                    inbound = turn(n, channel, platform="slack", text="hi", thread_id=where)
                    accepted = accept(store, rt.waker, inbound, settings=settings, clock=time.time)
                    drain(rt, accepted.session_key)
                    while flush(rt, f"slack:{channel}").reason != "idle":
                        time.sleep(0.1)
        finally:
            agent.close()  # type: ignore[attr-defined]
            store.close()
        statuses = [c for c in slack.calls if c.method == "assistant.threads.setStatus"]
        posts = [c for c in slack.calls if c.method == "chat.postMessage" and c.ok]
    assert len(statuses) == 1  # only the assistant thread's turn: a plain DM has no status
    (status,) = statuses
    assert status.params["channel_id"] == channel and status.params["thread_ts"] == thread
    assert status.params["status"] == "is thinking…"
    assert status.at < posts[0].at and posts[0].params.get("thread_ts") == thread
