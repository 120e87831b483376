"""Chaos with stream edits on: a real worker process streaming a Telegram reply into one message
is SIGKILLed mid-stream; the beat's redrive hands the turn to a second worker, which keeps
editing the same message, and the outbox finishes it. The user sees one message, holding the
transcript's reply; nothing was posted twice. Real Redis, real Celery workers and beat, the
fake Bot API driven through python-telegram-bot, the fake OpenAI server streaming slowly."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from producers.broker import BrokerWaker, broker_client
from producers.intake import accept
from shared.db import Store
from shared.pipeline import outbox
from tests.chaos import Fleet, env_for, open_turns, opened, worker_command
from tests.fakes.openai_server import FakeOpenAI, Step, running
from tests.fakes.stack import wait_for
from tests.fakes.telegram_api import FakeTelegram
from tests.pipeline_helpers import turn

pytestmark = pytest.mark.both_databases

TOKEN = "123456789:AAFakeTokenForTestsSecretPart"
CHAT = "5151"
REPLY = (
    "A long answer, streamed slowly so that the worker writing it can be killed halfway "
    "through, and then written again by another worker into the very same message."
)


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    with running() as server:
        yield server


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_worker_killed_mid_stream_leaves_one_message_with_the_final_text(
    tmp_path: Path, hermes_env: dict[str, str], model: FakeOpenAI
) -> None:
    # First attempt: ~9 s of writing (killed long before the end); the retry: ~1.5 s.
    model.script(
        Step(content=REPLY, chunk_size=6, chunk_delay=0.3),
        Step(content=REPLY, chunk_size=6, chunk_delay=0.05),
        model="main-model",
    )
    home = tmp_path / "fleet"
    home.mkdir()
    with FakeTelegram(TOKEN) as bot:
        database = hermes_env.get("HERMES_DATABASE_URL")
        env = env_for(
            home,
            hermes_env,
            HERMES_PIPELINE__LEASE_SECONDS="2",
            HERMES_PIPELINE__REDRIVE_SECONDS="1",
            HERMES_PIPELINE__RETRY_BACKOFF_SECONDS="0.2",
            HERMES_PLATFORMS__TELEGRAM__TOKEN=TOKEN,
            HERMES_PLATFORMS__TELEGRAM__API_BASE=bot.api_base,
            HERMES_PLATFORMS__TELEGRAM__STREAM_EDITS="true",
            HERMES_PLATFORMS__TELEGRAM__STREAM_EDIT_INTERVAL="0.5",
            HERMES_MODEL__BASE_URL=model.url,
            HERMES_MODEL__API_KEY="sk-test-not-secret",
            HERMES_MODEL__NAME="main-model",
            HERMES_MODEL__RETRIES="0",
            HERMES_AUXILIARY__NAME="aux-model",
            **({"HERMES_DATABASE_URL": database} if database else {}),
        )
        fleet = Fleet(home=home, env=env, worker_script=worker_command())
        try:
            fleet.start_redis()
            settings = fleet.settings()
            store = opened(settings)
            first = fleet.start_worker(concurrency=2)
            fleet.start_beat()
            accept(
                store,
                BrokerWaker(broker_client(settings)),
                turn(1, CHAT, platform="telegram", text="tell me at length"),
                settings=settings,
                clock=time.time,
            )
            # mid-stream: the message is up and has been edited at least once
            wait_for(lambda: len(bot.edits) >= 1, timeout=60)
            fleet.kill_worker(first)
            killed_at = bot.shown(CHAT)
            fleet.start_worker(concurrency=2)
            wait_for(lambda: open_turns(store) == 0, timeout=90)
            wait_for(lambda: _pending(store) == 0, timeout=30)
            wait_for(lambda: bot.shown(CHAT) == [REPLY], timeout=10)
            transcript = _assistant_texts(store)
            store.close()
        finally:
            fleet.stop()
        posts = [c for c in bot.calls if c.method == "sendMessage" and c.params.get("_ok")]
    assert len(killed_at) == 1 and killed_at[0] != REPLY  # it was killed halfway through
    assert transcript == [REPLY]  # once in the transcript
    assert len(posts) == 1  # one message ever posted: the retry edited it, the outbox finished it
    assert bot.shown(CHAT) == [REPLY]
    assert len(model.chats("main-model")) == 2  # the turn really ran twice


def _pending(store: Store) -> int:
    with store.read() as conn:
        return outbox.pending_count(conn)


def _assistant_texts(store: Store) -> list[str]:
    with store.read() as conn:
        rows = conn.execute(text("SELECT content FROM messages WHERE role = 'assistant'"))
        return [str(r[0]) for r in rows]
