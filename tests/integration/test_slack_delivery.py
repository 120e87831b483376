"""Slack delivery through slack_sdk.WebClient against the fake Web API, on real Redis."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from shared.db import Store, open_store
from shared.pipeline import outbox
from shared.platforms.slack import PLATFORM
from shared.settings import Settings, load_settings
from tests.fakes.delivery import delivery_runtime, reply, row
from tests.fakes.slack_api import FakeSlack
from tests.fakes.stack import redis_db_url
from workers.flush import flush

SLACK_LIMIT = PLATFORM.message_limit

TOKEN = "xoxb-1111-2222-SlackBotTokenSecret"


@pytest.fixture
def fake() -> Iterator[FakeSlack]:
    with FakeSlack(TOKEN) as server:
        yield server


@pytest.fixture
def sl(hermes_env: dict[str, str], redis_url: str, fake: FakeSlack) -> Settings:
    return load_settings(
        {
            **hermes_env,
            "HERMES_BROKER_URL": redis_db_url(redis_url),
            "HERMES_PLATFORMS__SLACK__TOKEN": TOKEN,
            "HERMES_PLATFORMS__SLACK__API_BASE": fake.api_base,
        }
    )


@pytest.fixture
def sl_store(sl: Settings) -> Iterator[Store]:
    store = open_store(sl.resolved_database_url)
    yield store
    store.close()


def test_replies_go_to_the_thread_split_and_escaped(
    sl: Settings, sl_store: Store, fake: FakeSlack
) -> None:
    long = "Use <b> & co.\n\n" + "\n".join("line " + "z" * 90 for _ in range(60))
    with delivery_runtime(sl, sl_store) as (rt, _):
        row_id = reply(sl_store, "slack", "C0GENERAL", long, thread_id="1767225700.000200")
        assert flush(rt, "slack:C0GENERAL").sent == 1
    sent = fake.sent()
    assert len(sent) == 2
    assert all(len(p["text"]) <= SLACK_LIMIT + 100 for p in sent)
    assert sent[0]["text"].startswith("Use &lt;b&gt; &amp; co.")
    assert {p["thread_ts"] for p in sent} == {"1767225700.000200"}
    assert row(sl_store, row_id).platform_message_id == ",".join(
        f"{1_700_000_000 + n}.000100" for n in (1, 2)
    )


def test_429_retry_after_cools_the_channel_and_403_fails_only_that_reply(
    sl: Settings, sl_store: Store, fake: FakeSlack
) -> None:
    fake.script("chat.postMessage", "429:1", "ok", "403", "channel_not_found", "ok")
    with delivery_runtime(sl, sl_store) as (rt, waker):
        reply(sl_store, "slack", "C1", "one")
        result = flush(rt, "slack:C1")
        assert (result.reason, result.retry_in) == ("cooldown", 1.0)
        assert flush(rt, "slack:C1").reason == "cooldown"
        assert len(fake.calls) == 1
        time.sleep(1.05)
        assert flush(rt, "slack:C1").sent == 1
        refused = reply(sl_store, "slack", "C2", "two")
        gone = reply(sl_store, "slack", "C2", "three")
        fine = reply(sl_store, "slack", "C2", "four")
        flush(rt, "slack:C2")
    assert row(sl_store, refused).status == row(sl_store, gone).status == outbox.FAILED
    assert row(sl_store, fine).status == outbox.SENT
    assert [p["text"] for p in fake.sent()] == ["one", "four"]
    assert waker.deliveries[0] == ("slack:C1", 1.0)


def test_a_dropped_connection_is_retried_and_the_token_stays_out_of_logs(
    sl: Settings, sl_store: Store, fake: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    fake.script("chat.postMessage", "drop")
    with delivery_runtime(sl, sl_store) as (rt, _):
        logging.getLogger("slack_sdk").setLevel(logging.DEBUG)
        try:
            row_id = reply(sl_store, "slack", "D1", "hello")
            assert flush(rt, "slack:D1").reason == "retry"
            with sl_store.write() as conn:
                conn.execute(text("UPDATE outbox SET not_before = NULL"))
                conn.execute(text("UPDATE leases SET cooldown_until = NULL"))
            assert flush(rt, "slack:D1").sent == 1
        finally:
            logging.getLogger("slack_sdk").setLevel(logging.WARNING)
    assert [p["text"] for p in fake.sent()] == ["hello"]
    assert "IncompleteRead" in (row(sl_store, row_id).error or "")
    assert "chat.postMessage" in caplog.text
    assert TOKEN not in caplog.text


def test_a_long_429_pauses_every_channel_a_short_one_only_its_own(
    sl: Settings, sl_store: Store, fake: FakeSlack
) -> None:
    fake.script("chat.postMessage", "429:1")
    with delivery_runtime(sl, sl_store) as (rt, _), delivery_runtime(sl, sl_store) as (rt2, _):
        reply(sl_store, "slack", "C71", "short wait")
        assert flush(rt, "slack:C71").reason == "cooldown"
        reply(sl_store, "slack", "C72", "another channel is not held up")
        assert flush(rt2, "slack:C72").sent == 1
        fake.script("chat.postMessage", "429:8")
        reply(sl_store, "slack", "C73", "tier limit")
        result = flush(rt, "slack:C73")
        assert (result.reason, result.retry_in) == ("cooldown", 8.0)
        calls = len(fake.calls)
        reply(sl_store, "slack", "C74", "held by the workspace cooldown")
        held = flush(rt2, "slack:C74")
        assert held.reason == "cooldown" and held.retry_in is not None and held.retry_in > 7
        assert len(fake.calls) == calls
