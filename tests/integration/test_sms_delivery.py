"""SMS delivery through twilio's REST client against the fake Twilio API, on real Redis: parts
of at most 1,600 characters, 429s, numbers that replied STOP, dropped connections; and the
MMS fetcher's rules for where the account's credentials may go."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from shared.db import Store, open_store
from shared.pipeline import outbox
from shared.platforms.sms import PLATFORM
from shared.settings import Settings, load_settings
from shared.turns import Attachment
from tests.fakes.delivery import delivery_runtime, reply, row
from tests.fakes.stack import redis_db_url
from tests.fakes.twilio_api import ACCOUNT, NUMBER, TOKEN, FakeTwilio, message_sid
from workers.agent.media import FetchError
from workers.delivery.fetch import FetchFailed, platform_fetchers
from workers.delivery.sms import SmsFetcher
from workers.flush import flush

LIMIT = PLATFORM.message_limit
TO = "+14155550123"
SERVICE = "MG" + "5" * 32


@pytest.fixture
def fake() -> Iterator[FakeTwilio]:
    with FakeTwilio() as server:
        yield server


def sms_settings(hermes_env: dict[str, str], redis_url: str, api: str, **more: str) -> Settings:
    return load_settings(
        {
            **hermes_env,
            "HERMES_BROKER_URL": redis_db_url(redis_url),
            "HERMES_PLATFORMS__SMS__TOKEN": TOKEN,
            "HERMES_PLATFORMS__SMS__ACCOUNT_SID": ACCOUNT,
            "HERMES_PLATFORMS__SMS__API_BASE": api,
            **{f"HERMES_PLATFORMS__SMS__{k.upper()}": v for k, v in more.items()},
        }
    )


@pytest.fixture
def sms(hermes_env: dict[str, str], redis_url: str, fake: FakeTwilio) -> Settings:
    return sms_settings(hermes_env, redis_url, fake.api_base, from_number=NUMBER)


@pytest.fixture
def sms_store(sms: Settings) -> Iterator[Store]:
    store = open_store(sms.resolved_database_url)
    yield store
    store.close()


def unblock(store: Store) -> None:
    with store.write() as conn:
        conn.execute(text("UPDATE outbox SET not_before = NULL"))
        conn.execute(text("UPDATE leases SET cooldown_until = NULL"))


def test_a_long_reply_goes_in_order_as_parts_of_at_most_1600(
    sms: Settings, sms_store: Store, fake: FakeTwilio
) -> None:
    long = "\n\n".join(f"paragraph {n}: " + "lorem ipsum " * 30 for n in range(12))
    assert len(long) > 2 * LIMIT
    with delivery_runtime(sms, sms_store) as (rt, _):
        row_id = reply(sms_store, "sms", TO, long)
        assert flush(rt, f"sms:{TO}").sent == 1
    sent = fake.sent(TO)
    assert len(sent) == 3 and all(len(m["Body"]) <= LIMIT for m in sent)
    assert " ".join(m["Body"] for m in sent).split() == long.split()
    assert {m["From"] for m in sent} == {NUMBER}
    assert row(sms_store, row_id).platform_message_id == ",".join(message_sid(n) for n in (1, 2, 3))


def test_a_429_cools_the_sending_number_and_a_number_that_said_stop_fails_only_its_reply(
    sms: Settings, sms_store: Store, fake: FakeTwilio
) -> None:
    fake.script("429")
    with delivery_runtime(sms, sms_store) as (rt, waker):
        reply(sms_store, "sms", TO, "one")
        result = flush(rt, f"sms:{TO}")
        assert (result.reason, result.retry_in) == ("cooldown", 1.0)
        reply(sms_store, "sms", "+14155550124", "another recipient waits too")
        assert flush(rt, "sms:+14155550124").reason == "cooldown"  # the number is cooling
        assert fake.attempts == 1
        time.sleep(1.05)
        assert flush(rt, f"sms:{TO}").sent == 1
        fake.script("21610", "ok")
        opted_out = reply(sms_store, "sms", "+14155550199", "to someone who replied STOP")
        fine = reply(sms_store, "sms", "+14155550199", "the next is tried on its own")
        unblock(sms_store)
        flush(rt, "sms:+14155550199")
    assert row(sms_store, opted_out).status == outbox.FAILED
    assert "21610" in (row(sms_store, opted_out).error or "")
    assert row(sms_store, fine).status == outbox.SENT
    assert waker.deliveries[0] == (f"sms:{TO}", 1.0)


def test_a_dropped_connection_resumes_without_resending_and_the_token_stays_out_of_logs(
    sms: Settings, sms_store: Store, fake: FakeTwilio, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    long = "first half " * 130 + "\n\n" + "second half " * 100
    fake.script("ok", "drop")
    with delivery_runtime(sms, sms_store) as (rt, _):
        logging.getLogger("twilio").setLevel(logging.DEBUG)
        try:
            row_id = reply(sms_store, "sms", TO, long)
            assert flush(rt, f"sms:{TO}").reason == "retry"
            unblock(sms_store)
            assert flush(rt, f"sms:{TO}").sent == 1
        finally:
            logging.getLogger("twilio").setLevel(logging.WARNING)
    bodies = [m["Body"] for m in fake.sent(TO)]
    assert len(bodies) == 2 and bodies[0].startswith("first half")
    assert bodies[1].startswith("second half")
    assert fake.attempts == 3  # part one once, part two dropped then sent
    assert row(sms_store, row_id).status == outbox.SENT
    assert "Messages.json" in caplog.text  # twilio did log its requests, without the token
    assert TOKEN not in caplog.text


def test_a_messaging_service_sends_instead_of_a_number(
    hermes_env: dict[str, str], redis_url: str, fake: FakeTwilio
) -> None:
    settings = sms_settings(hermes_env, redis_url, fake.api_base, messaging_service_sid=SERVICE)
    store = open_store(settings.resolved_database_url)
    try:
        with delivery_runtime(settings, store) as (rt, _):
            reply(store, "sms", TO, "via the service")
            assert flush(rt, f"sms:{TO}").sent == 1
    finally:
        store.close()
    assert fake.sent(TO) == [{"To": TO, "Body": "via the service", "MessagingServiceSid": SERVICE}]


def test_media_is_fetched_with_basic_auth_only_from_twilio(sms: Settings, fake: FakeTwilio) -> None:
    fake.media["ME1"] = (b"x" * 500, "image/jpeg")
    (fetcher,) = platform_fetchers(sms).values()
    assert isinstance(fetcher, SmsFetcher)
    image = Attachment("image", None, "image/jpeg", fake.media_url("MM1", "ME1"))
    assert fetcher.fetch(image, 1000) == b"x" * 500
    for url, says in [
        ("https://evil.example.com/2010-04-01/Media/ME1", "not Twilio's"),
        ("http://api.twilio.com/2010-04-01/Media/ME1", "not Twilio's"),  # plain http
        ("https://api.twilio.com.evil.example/Media/ME1", "not Twilio's"),
        (fake.media_url("MM1", "ME-gone"), "404"),
    ]:
        with pytest.raises(FetchError, match=says):  # refused for good: a note, no retries
            fetcher.fetch(Attachment("image", url=url), 1000)
    with pytest.raises(FetchError, match="limit"):
        fetcher.fetch(image, 100)
    assert fetcher.may_carry_credentials("https://api.twilio.com/2010-04-01/x")
    assert fetcher.may_carry_credentials("https://media.twiliocdn.twilio.com/x")
    assert [d[0] for d in fake.downloads] == ["ME1", "ME-gone", "ME1"]
    assert fake.served is not None
    fake.served.stop()  # Twilio unreachable
    with pytest.raises(FetchFailed) as down:  # network trouble: the turn is retried
        fetcher.fetch(image, 1000)
    assert not isinstance(down.value, FetchError) and TOKEN not in str(down.value)
