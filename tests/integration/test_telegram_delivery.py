"""Telegram delivery through python-telegram-bot against the fake Bot API, on real Redis:
split replies in order, topics and replies, 429 cooldowns, 403, dropped connections,
chat migration, and the token never in a log line."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from shared.db import Store, open_store
from shared.pipeline import outbox
from shared.platforms.telegram import PLATFORM
from shared.settings import Settings, load_settings
from shared.store import chats
from tests.fakes.delivery import delivery_runtime, reply, row
from tests.fakes.stack import redis_db_url
from tests.fakes.telegram_api import FakeTelegram
from workers.delivery.split import utf16_units
from workers.flush import flush

TELEGRAM_LIMIT = PLATFORM.message_limit

TOKEN = "123456789:AAFakeTokenForTestsSecretPart"


@pytest.fixture
def fake() -> Iterator[FakeTelegram]:
    with FakeTelegram(TOKEN) as server:
        yield server


@pytest.fixture
def tg(hermes_env: dict[str, str], redis_url: str, fake: FakeTelegram) -> Settings:
    return load_settings(
        {
            **hermes_env,
            "HERMES_BROKER_URL": redis_db_url(redis_url),
            "HERMES_PLATFORMS__TELEGRAM__TOKEN": TOKEN,
            "HERMES_PLATFORMS__TELEGRAM__API_BASE": fake.api_base,
        }
    )


@pytest.fixture
def tg_store(tg: Settings) -> Iterator[Store]:
    store = open_store(tg.resolved_database_url)
    yield store
    store.close()


def test_a_long_reply_is_split_in_order_into_the_topic(
    tg: Settings, tg_store: Store, fake: FakeTelegram
) -> None:
    long = "\n\n".join(f"Paragraph {n}: " + "🙂 word " * 300 for n in range(6))
    with delivery_runtime(tg, tg_store) as (rt, _):
        row_id = reply(tg_store, "telegram", "-1009876543210", long, thread_id="42", reply_to="88")
        result = flush(rt, "telegram:-1009876543210")
        assert (result.sent, result.reason) == (0, "cooldown")  # burst of 3 per chat, then wait
        time.sleep(result.retry_in or 0)
        while (result := flush(rt, "telegram:-1009876543210")).reason != "idle":
            time.sleep(result.retry_in or 0.1)
    sent = fake.sent("-1009876543210")
    assert len(sent) > 3
    assert all(utf16_units(p["text"]) <= TELEGRAM_LIMIT for p in sent)
    assert "".join(p["text"] for p in sent).replace("\n", "").replace(" ", "") == long.replace(
        "\n", ""
    ).replace(" ", "")
    assert all(p["message_thread_id"] == 42 for p in sent)
    assert sent[0]["reply_parameters"]["message_id"] == 88
    assert all("reply_parameters" not in p for p in sent[1:])
    done = row(tg_store, row_id)
    assert done.status == "sent" and done.platform_message_id is not None
    assert len(done.platform_message_id.split(",")) == len(sent)


def test_429_cools_the_chat_down_for_every_worker_and_frees_the_slot(
    tg: Settings, tg_store: Store, fake: FakeTelegram
) -> None:
    fake.script("sendMessage", "429:1")
    with delivery_runtime(tg, tg_store) as (rt, waker), delivery_runtime(tg, tg_store) as (rt2, _):
        reply(tg_store, "telegram", "111", "first")
        reply(tg_store, "telegram", "111", "second")
        started = time.monotonic()
        result = flush(rt, "telegram:111")
        assert result.reason == "cooldown" and result.retry_in == pytest.approx(1, abs=0.1)
        assert time.monotonic() - started < 0.9  # no sleeping in the worker
        assert waker.deliveries[-1] == ("telegram:111", result.retry_in)
        # another worker honours the cooldown (the lane's, and Redis's for the chat)
        assert flush(rt2, "telegram:111").reason == "cooldown"
        assert len(fake.calls) == 1
        time.sleep(1.05)
        assert flush(rt2, "telegram:111").sent == 2
    assert [p["text"] for p in fake.sent("111")] == ["first", "second"]
    assert fake.calls[1].at - fake.calls[0].at >= 1.0


def test_a_split_reply_resumes_after_a_429_without_resending_parts(
    tg: Settings, tg_store: Store, fake: FakeTelegram
) -> None:
    parts = [f"part {n} " + "x" * 4000 for n in range(3)]
    fake.script("sendMessage", "ok", "429:1")
    with delivery_runtime(tg, tg_store) as (rt, _):
        reply(tg_store, "telegram", "222", "\n\n".join(parts))
        assert flush(rt, "telegram:222").reason == "cooldown"
        time.sleep(1.05)
        assert flush(rt, "telegram:222").sent == 1
    assert [p["text"] for p in fake.sent("222")] == parts


def test_a_user_who_blocked_the_bot_fails_that_reply_only(
    tg: Settings, tg_store: Store, fake: FakeTelegram
) -> None:
    fake.blocked.add("333")
    with delivery_runtime(tg, tg_store) as (rt, _):
        blocked = reply(tg_store, "telegram", "333", "are you there?")
        later = reply(tg_store, "telegram", "333", "hello?")
        fine = reply(tg_store, "telegram", "444", "hi")
        assert flush(rt, "telegram:333").reason == "idle"
        assert flush(rt, "telegram:444").sent == 1
    assert row(tg_store, blocked).status == outbox.FAILED
    assert "403" in (row(tg_store, blocked).error or "")
    assert row(tg_store, later).status == outbox.FAILED
    assert row(tg_store, fine).status == outbox.SENT


def test_a_dropped_connection_is_retried_with_backoff_and_sent_once(
    tg: Settings, tg_store: Store, fake: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    fake.script("sendMessage", "drop")
    caplog.set_level(logging.DEBUG)
    with delivery_runtime(tg, tg_store) as (rt, _):
        row_id = reply(tg_store, "telegram", "555", "hello")
        result = flush(rt, "telegram:555")
        assert (result.reason, result.retry_in) == ("retry", 2.0)
        assert "RemoteProtocolError" in (row(tg_store, row_id).error or "")
        with tg_store.write() as conn:  # skip the wait
            conn.execute(text("UPDATE outbox SET not_before = NULL"))
            conn.execute(text("UPDATE leases SET cooldown_until = NULL"))
        assert flush(rt, "telegram:555").sent == 1
    assert [p["text"] for p in fake.sent("555")] == ["hello"]
    assert TOKEN not in caplog.text
    assert TOKEN.split(":")[1] not in caplog.text


def test_the_token_never_reaches_the_logs(
    tg: Settings, tg_store: Store, fake: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    secret = TOKEN.split(":")[1]
    caplog.set_level(logging.DEBUG)
    with delivery_runtime(tg, tg_store) as (rt, _):
        for name in ("httpx", "httpcore", "telegram"):  # even loggers turned up to DEBUG
            logging.getLogger(name).setLevel(logging.DEBUG)
        try:
            fake.script("sendMessage", "ok", "500", "drop", "403")
            for n in range(4):
                reply(tg_store, "telegram", f"66{n}", f"message {n}")
                flush(rt, f"telegram:66{n}")
        finally:
            for name in ("httpx", "httpcore", "telegram"):
                logging.getLogger(name).setLevel(logging.WARNING)
        logging.getLogger("test").error("a line with the token %s", TOKEN)
    assert fake.sent("660")
    assert "sendMessage" in caplog.text  # the loggers did speak …
    assert secret not in caplog.text  # … without the token
    with tg_store.read() as conn:
        errors = " ".join(str(e) for e in conn.execute(text("SELECT error FROM outbox")).scalars())
    assert secret not in errors


def test_a_group_that_became_a_supergroup_is_followed(
    tg: Settings, tg_store: Store, fake: FakeTelegram
) -> None:
    fake.script("sendMessage", "migrate:-1001112223334")
    with tg_store.write() as conn:
        chats.set_home_channel(conn, chats.HomeChannel("telegram", "-4012345678", "group"))
    with delivery_runtime(tg, tg_store) as (rt, _):
        first = reply(tg_store, "telegram", "-4012345678", "one")
        second = reply(tg_store, "telegram", "-4012345678", "two")
        assert flush(rt, "telegram:-4012345678").sent == 2  # both went to the new id
        assert row(tg_store, second).lane == "telegram:-1001112223334"  # pending rows moved
        third = reply(tg_store, "telegram", "-4012345678", "three")  # a straggler, old id
        assert flush(rt, "telegram:-4012345678").sent == 1
    assert [p["text"] for p in fake.sent("-1001112223334")] == ["one", "two", "three"]
    assert {row(tg_store, n).status for n in (first, second, third)} == {outbox.SENT}
    with tg_store.read() as conn:
        home = chats.get_home_channel(conn, "telegram")
    assert home is not None and home.chat_id == "-1001112223334"


def test_errors_after_a_migration_are_mapped_like_any_other(
    tg: Settings, tg_store: Store, fake: FakeTelegram
) -> None:
    """The resend to the new id answers 429, then (later) 403: a cooldown, then a failure —
    never a raw exception retried as if the network had dropped."""
    fake.script("sendMessage", "migrate:-1005556667778", "429:1")
    with delivery_runtime(tg, tg_store) as (rt, _):
        first = reply(tg_store, "telegram", "-4055566677", "one")
        result = flush(rt, "telegram:-4055566677")
        assert (result.reason, result.retry_in) == ("cooldown", pytest.approx(1, abs=0.1))
        assert "429" in (row(tg_store, first).error or "")
        assert row(tg_store, first).attempts == 0  # a cooldown, not a failed attempt
        time.sleep(1.05)
        fake.blocked.add("-1005556667778")
        assert flush(rt, "telegram:-1005556667778").reason == "idle"
    assert row(tg_store, first).status == outbox.FAILED
    assert "telegram 403" in (row(tg_store, first).error or "")
    assert [str(c.params.get("chat_id")) for c in fake.calls] == [
        "-4055566677",
        "-1005556667778",
        "-1005556667778",
    ]


def test_a_long_429_pauses_every_chat_of_the_bot_a_short_one_only_its_chat(
    tg: Settings, tg_store: Store, fake: FakeTelegram
) -> None:
    fake.script("sendMessage", "429:1")
    with delivery_runtime(tg, tg_store) as (rt, _), delivery_runtime(tg, tg_store) as (rt2, _):
        reply(tg_store, "telegram", "771", "short wait")
        assert flush(rt, "telegram:771").reason == "cooldown"
        reply(tg_store, "telegram", "772", "another chat is not held up")
        assert flush(rt2, "telegram:772").sent == 1
        fake.script("sendMessage", "429:8")
        reply(tg_store, "telegram", "773", "flooded")
        result = flush(rt, "telegram:773")
        assert result.reason == "cooldown" and result.retry_in == pytest.approx(8, abs=0.1)
        calls = len(fake.calls)
        reply(tg_store, "telegram", "774", "held by the bot-wide cooldown")
        held = flush(rt2, "telegram:774")  # another worker, another chat: Redis holds it
        assert held.reason == "cooldown" and held.retry_in is not None and held.retry_in > 7
        assert len(fake.calls) == calls
