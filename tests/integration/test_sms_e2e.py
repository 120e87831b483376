"""SMS end to end: Twilio's signed form posts at the real gateway app over real HTTP, the turn
in state.db, a real Celery worker (real Redis broker) running the offline model, and the reply
sent by twilio's REST client to a fake Twilio API on 127.0.0.1 — split at 1,600 characters,
MMS media fetched with the account's credentials, /title and /new, STOP left alone."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlencode

import httpx
import pytest
from celery.contrib.testing.worker import start_worker

from producers.broker import BrokerWaker, broker_client
from producers.gateway.app import create_app
from producers.gateway.deps import Gateway
from producers.intake import accept
from shared.db import Store, open_store
from shared.platforms.sms import PLATFORM
from shared.settings import Settings, load_settings
from shared.store import chats, session_listing
from tests.fakes.golden import load
from tests.fakes.server import Served
from tests.fakes.stack import redis_db_url, wait_for
from tests.fakes.twilio_api import ACCOUNT, NUMBER, TOKEN, FakeTwilio
from tests.pipeline_helpers import turn
from workers.app import create_app as create_celery_app

REDIS_DB = 12
USER = "+14155550123"
ECHO = "so I can only echo: "


@pytest.fixture
def twilio() -> Iterator[FakeTwilio]:
    with FakeTwilio() as fake:
        yield fake


@pytest.fixture
def sms_settings(hermes_env: dict[str, str], redis_url: str, twilio: FakeTwilio) -> Settings:
    return load_settings(
        {
            **hermes_env,
            "HERMES_BROKER_URL": redis_db_url(redis_url, REDIS_DB),
            "HERMES_PLATFORMS__SMS__TOKEN": TOKEN,
            "HERMES_PLATFORMS__SMS__ACCOUNT_SID": ACCOUNT,
            "HERMES_PLATFORMS__SMS__FROM_NUMBER": NUMBER,
            "HERMES_PLATFORMS__SMS__API_BASE": twilio.api_base,
        }
    )


@pytest.fixture
def sms_store(sms_settings: Settings) -> Iterator[Store]:
    store = open_store(sms_settings.resolved_database_url)
    yield store
    store.close()


class Phone:
    """Posts what Twilio would post for messages from USER, signed as Twilio signs them."""

    def __init__(self, base: str, twilio: FakeTwilio) -> None:
        self.url = f"{base}/sms/twilio"
        self.twilio = twilio
        self.count = 0

    def send(self, body: str, *, sid: str | None = None, **more: str) -> httpx.Response:
        if sid is None:
            self.count += 1
            sid = f"SM{self.count:032x}"
        payload, _ = load("sms", "dm")
        fields = {**payload, "MessageSid": sid, "SmsMessageSid": sid, "Body": body, **more}
        return httpx.post(
            self.url,
            content=urlencode(fields),
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "X-Twilio-Signature": self.twilio.sign(self.url, fields),
            },
            timeout=10,
        )


@contextmanager
def fleet(settings: Settings, store: Store, twilio: FakeTwilio) -> Iterator[Phone]:
    """A real Celery worker and the real gateway app on 127.0.0.1, for the test's duration."""
    celery = create_celery_app(settings)
    producer = broker_client(settings)
    gateway = Gateway(settings, store, BrokerWaker(producer), time.time)
    try:
        with (
            start_worker(celery, pool="threads", concurrency=4, perform_ping_check=False),
            Served(create_app(gateway)) as base,
        ):
            yield Phone(base, twilio)
    finally:
        celery.hermes_runtimes.close()
        producer.close()


def replies(twilio: FakeTwilio) -> list[str]:
    return [m["Body"] for m in twilio.sent(USER)]


def settle(twilio: FakeTwilio, count: int) -> list[str]:
    """The replies once `count` have arrived and the outbox has nothing more for USER."""
    wait_for(lambda: len(twilio.sent(USER)) >= count, timeout=90)
    return replies(twilio)


@pytest.mark.timeout(180)
def test_a_dm_is_answered_once_title_and_new_work_and_stop_is_left_to_the_carrier(
    sms_settings: Settings, sms_store: Store, twilio: FakeTwilio
) -> None:
    with fleet(sms_settings, sms_store, twilio) as phone:
        first = phone.send("hello from my phone", sid="SM" + "1" * 32)
        again = phone.send("hello from my phone", sid="SM" + "1" * 32)  # Twilio redelivers
        assert first.status_code == again.status_code == 200
        assert first.text.endswith("<Response />") and again.text == first.text
        stop = phone.send("STOP")
        assert stop.status_code == 200 and stop.text.endswith("<Response />")
        assert phone.send("/title Trip plans").status_code == 200
        assert phone.send("/new").status_code == 200
        # The session's turns are answered in order: once "/new" is answered, anything STOP
        # or the redelivery had caused would have been sent before it.
        sent = settle(twilio, 3)
        with sms_store.read() as conn:
            found, _ = session_listing.list_sessions(conn, source="sms")
    assert len(sent) == 3
    assert sent[0].endswith(ECHO + "hello from my phone")
    assert sent[1:] == ["Title set to 'Trip plans'.", "Started a new session."]
    assert {m["From"] for m in twilio.sent()} == {NUMBER}
    titled = [s for s in found if s.record.title == "Trip plans"]
    assert len(titled) == 1 and titled[0].record.message_count == 2  # STOP was never a turn


@pytest.mark.timeout(180)
def test_an_mms_is_fetched_with_the_accounts_credentials_and_a_long_reply_split_at_1600(
    sms_settings: Settings, sms_store: Store, twilio: FakeTwilio
) -> None:
    notes = "\n".join(f"note {n:03d}: bring the maps and the compass" for n in range(90))
    twilio.media["ME" + "a" * 32] = (notes.encode(), "text/plain")
    media = twilio.media_url("MM" + "2" * 32, "ME" + "a" * 32)
    elsewhere = "https://cdn.example.net/steal-the-credentials.txt"
    with fleet(sms_settings, sms_store, twilio) as phone:
        mms = phone.send(
            "see attached",
            sid="MM" + "2" * 32,
            NumMedia="2",
            MediaUrl0=media,
            MediaContentType0="text/plain",
            MediaUrl1=elsewhere,
            MediaContentType1="text/plain",
        )
        assert mms.status_code == 200
        # The offline model echoes the attached document: about 4,000 characters in all.
        wait_for(lambda: "cdn.example.net" in "".join(replies(twilio)), timeout=90)
        sent = replies(twilio)
    whole = "\n".join(sent)
    assert len(sent) >= 3 and all(len(part) <= PLATFORM.message_limit for part in sent)
    assert len(sent[0]) > PLATFORM.message_limit // 2  # cut near the limit, not needlessly
    assert sent[0].startswith("[offline model]") and ECHO + "see attached" in sent[0]
    assert "note 000: bring the maps" in whole and "note 089: bring the maps" in whole
    assert "cdn.example.net is not Twilio's" in whole
    assert [d[0] for d in twilio.downloads] == ["ME" + "a" * 32]  # nothing went elsewhere
    assert twilio.downloads[0][1] is not None and twilio.downloads[0][1].startswith("Basic ")


def _from_the_terminal(settings: Settings, store: Store, n: int, text: str) -> None:
    producer = broker_client(settings)
    try:
        accepted = accept(
            store, BrokerWaker(producer), turn(n, "term", text=text), settings=settings,
            clock=time.time,
        )  # fmt: skip
        assert accepted.woken
    finally:
        producer.close()


@pytest.mark.timeout(180)
def test_a_configured_home_number_then_sethome_take_handoffs(
    hermes_env: dict[str, str], redis_url: str, twilio: FakeTwilio
) -> None:
    home = "+14155550777"
    settings = load_settings(
        {
            **hermes_env,
            "HERMES_BROKER_URL": redis_db_url(redis_url, REDIS_DB),
            "HERMES_PLATFORMS__SMS__TOKEN": TOKEN,
            "HERMES_PLATFORMS__SMS__ACCOUNT_SID": ACCOUNT,
            "HERMES_PLATFORMS__SMS__FROM_NUMBER": NUMBER,
            "HERMES_PLATFORMS__SMS__API_BASE": twilio.api_base,
            "HERMES_PLATFORMS__SMS__HOME_CHANNEL": home,
        }
    )
    store = open_store(settings.resolved_database_url)
    try:
        with fleet(settings, store, twilio) as phone:
            # Nobody has texted yet: the configured number is the fallback.
            _from_the_terminal(settings, store, 1, "plan my trip")
            _from_the_terminal(settings, store, 2, "/handoff sms")
            # The note, then the agent's summary: the handoff completes once both are sent.
            wait_for(lambda: len(twilio.sent(home)) >= 2, timeout=90)
            # Then USER says /sethome from their phone: the next hand-off goes there.
            assert phone.send("/sethome").status_code == 200
            settle(twilio, 1)
            _from_the_terminal(settings, store, 3, "/handoff sms")
            settle(twilio, 3)
            with store.read() as conn:
                stored = chats.get_home_channel(conn, "sms")
    finally:
        store.close()
    to_home = [m["Body"] for m in twilio.sent(home)]
    assert len(to_home) == 2 and to_home[0].startswith("↻ Continuing session ")
    assert replies(twilio)[0] == (
        "This chat is now the sms home channel: notices and hand-offs come here."
    )
    assert replies(twilio)[1].startswith("↻ Continuing session ")
    assert stored is not None and (stored.chat_id, stored.chat_type) == (USER, "dm")
