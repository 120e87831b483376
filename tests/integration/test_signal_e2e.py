"""Signal end to end: a fake signal-cli-rest-api daemon on 127.0.0.1 polled by the real
receiver, the turn in the store, a real Celery worker (real Redis broker) running the offline
model, and the reply posted to the daemon's /v2/send — DMs, groups, a redelivery answered
once, a malformed envelope skipped, an allow-list refusal, /title and /new, an attachment
fetched from the daemon and a long reply split at 2,000 characters, hand-offs home."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import pytest
from celery.contrib.testing.worker import start_worker
from sqlalchemy import text

from producers.broker import BrokerWaker, broker_client
from producers.gateway.deps import Gateway
from producers.intake import accept
from producers.signal.receiver import SignalReceiver
from shared.db import Store, open_store
from shared.platforms.signal import PLATFORM
from shared.settings import Settings, load_settings
from shared.store import chats, session_listing
from tests.fakes.background import Background
from tests.fakes.signal_api import ACCOUNT, FakeSignalDaemon, envelope
from tests.fakes.stack import redis_db_url, wait_for
from tests.pipeline_helpers import turn
from workers.app import create_app as create_celery_app

pytestmark = pytest.mark.both_databases

REDIS_DB = 13
USER = "+15557770001"
STRANGER = "+15557770999"
GROUP_ID = "aGVybWVzIHRlc3QgZ3JvdXAgaWQgMDEyMzQ1Njc4OSE="  # 32 bytes, as Signal's are
GROUP_CHAT = "group." + base64.b64encode(GROUP_ID.encode()).decode()
ECHO = "so I can only echo: "


@pytest.fixture
def daemon() -> Iterator[FakeSignalDaemon]:
    with FakeSignalDaemon() as fake:
        yield fake


def signal_settings(
    hermes_env: dict[str, str], redis_url: str, daemon: FakeSignalDaemon, **more: str
) -> Settings:
    return load_settings(
        {
            **hermes_env,
            "HERMES_BROKER_URL": redis_db_url(redis_url, REDIS_DB),
            "HERMES_PLATFORMS__SIGNAL__TOKEN": ACCOUNT,
            "HERMES_PLATFORMS__SIGNAL__API_BASE": daemon.api_base,
            "HERMES_PLATFORMS__SIGNAL__POLL_TIMEOUT": "1",
            **{f"HERMES_PLATFORMS__SIGNAL__{k.upper()}": v for k, v in more.items()},
        }
    )


@contextmanager
def fleet(settings: Settings, store: Store) -> Iterator[SignalReceiver]:
    """A real Celery worker and the real Signal receiver polling the fake daemon."""
    celery = create_celery_app(settings)
    producer = broker_client(settings)
    gateway = Gateway(settings, store, BrokerWaker(producer), time.time)
    conf = settings.platforms.of("signal")
    assert conf.api_base is not None
    receiver = SignalReceiver(gateway, account=ACCOUNT, api_base=conf.api_base, poll_timeout=1)
    try:
        with (
            start_worker(celery, pool="threads", concurrency=4, perform_ping_check=False),
            Background(receiver.run),
        ):
            yield receiver
    finally:
        celery.hermes_runtimes.close()
        producer.close()


def inbox(store: Store) -> list[str]:
    with store.read() as conn:
        rows = conn.execute(text("SELECT event_id FROM inbox WHERE platform = 'signal'"))
        return sorted(str(r[0]) for r in rows)


def texts(daemon: FakeSignalDaemon, recipient: str) -> list[str]:
    return [str(s["message"]) for s in daemon.sent(recipient)]


@pytest.mark.timeout(180)
def test_dm_group_redelivery_malformed_allow_list_title_and_new(
    hermes_env: dict[str, str], redis_url: str, daemon: FakeSignalDaemon
) -> None:
    settings = signal_settings(hermes_env, redis_url, daemon, allowed_users=f"{USER},+15557770002")
    store = open_store(settings.resolved_database_url)
    try:
        with fleet(settings, store):
            daemon.deliver(envelope("hello from signal", timestamp=1_700_000_000_001))
            daemon.deliver(envelope("hello from signal", timestamp=1_700_000_000_001))  # again
            daemon.deliver(
                {"envelope": {"source": USER, "timestamp": "soon", "dataMessage": {}}},
                {"envelope": "not an object"},
                ["not", "an", "item"],
                {"envelope": {"timestamp": 1, "dataMessage": {"message": "who am I"}}},
            )
            daemon.deliver(envelope("let me in", timestamp=1_700_000_000_002, source=STRANGER))
            daemon.deliver(
                envelope(
                    "hello group",
                    timestamp=1_700_000_000_003,
                    source="+15557770002",
                    group=GROUP_ID,
                )
            )
            wait_for(lambda: len(daemon.sent(USER)) >= 1, timeout=90)
            daemon.deliver(envelope("/title Signal plans", timestamp=1_700_000_000_004))
            daemon.deliver(envelope("/new", timestamp=1_700_000_000_005))
            wait_for(lambda: len(daemon.sent(USER)) >= 3, timeout=90)
            wait_for(lambda: len(daemon.sent(GROUP_CHAT)) >= 1, timeout=90)
            time.sleep(1.0)  # anything the redelivery or the bad items caused would show now
            with store.read() as conn:
                found, _ = session_listing.list_sessions(conn, source="signal")
            events = inbox(store)
    finally:
        store.close()
    dm = texts(daemon, USER)
    assert len(dm) == 3, dm  # the redelivered message was answered once
    assert dm[0].endswith(ECHO + "hello from signal")
    assert dm[1:] == ["Title set to 'Signal plans'.", "Started a new session."]
    first = daemon.sent(USER)[0]
    assert first["number"] == ACCOUNT
    assert (first["quote_timestamp"], first["quote_author"]) == (1_700_000_000_001, USER)
    group = daemon.sent(GROUP_CHAT)
    assert len(group) == 1 and "hello group" in group[0]["message"]
    assert group[0]["recipients"] == [GROUP_CHAT]
    refusal = daemon.sent(STRANGER)
    assert len(refusal) == 1 and refusal[0]["recipients"] == [STRANGER]
    # Stored: the DM's three turns and the group's; nothing from the stranger, nothing malformed.
    assert events == sorted(
        [
            f"{USER}:1700000000001",
            "+15557770002:1700000000003",
            f"{USER}:1700000000004",
            f"{USER}:1700000000005",
        ]
    )
    titled = [s for s in found if s.record.title == "Signal plans"]
    assert len(titled) == 1
    # The receiver and the worker spoke only to the configured daemon.
    host = urlsplit(daemon.api_base).netloc
    assert daemon.requests and {h for _, _, h in daemon.requests} == {host}


@pytest.mark.timeout(180)
def test_an_attachment_is_fetched_from_the_daemon_and_a_long_reply_split_at_2000(
    hermes_env: dict[str, str], redis_url: str, daemon: FakeSignalDaemon
) -> None:
    notes = "\n".join(f"note {n:03d}: bring the maps and the compass" for n in range(90))
    daemon.attachments["att1.txt"] = notes.encode()
    settings = signal_settings(hermes_env, redis_url, daemon)
    store = open_store(settings.resolved_database_url)
    try:
        with fleet(settings, store):
            daemon.deliver(
                envelope(
                    "see attached",
                    timestamp=1_700_000_000_010,
                    attachments=[
                        {
                            "contentType": "text/plain",
                            "filename": "notes.txt",
                            "id": "att1.txt",
                            "size": len(notes),
                        },
                    ],
                )
            )
            wait_for(lambda: "note 089" in "".join(texts(daemon, USER)), timeout=90)
            time.sleep(0.5)
            sent = texts(daemon, USER)
    finally:
        store.close()
    assert len(sent) >= 2 and all(len(part) <= PLATFORM.message_limit for part in sent)
    assert len(sent[0]) > PLATFORM.message_limit // 2  # cut near the limit, not needlessly
    whole = "\n".join(sent)
    assert ECHO + "see attached" in sent[0]
    assert "note 000: bring the maps" in whole and "note 089: bring the maps" in whole
    assert ("GET", "/v1/attachments/att1.txt") in [(m, p) for m, p, _ in daemon.requests]
    # Only the first part quotes the user's message.
    quoted = [s for s in daemon.sent(USER) if "quote_timestamp" in s]
    assert len(quoted) == 1 and quoted[0]["message"] == sent[0]


def _from_the_terminal(settings: Settings, store: Store, n: int, words: str) -> None:
    producer = broker_client(settings)
    try:
        accepted = accept(
            store, BrokerWaker(producer), turn(n, "term", text=words), settings=settings,
            clock=time.time,
        )  # fmt: skip
        assert accepted.woken
    finally:
        producer.close()


@pytest.mark.timeout(180)
def test_a_configured_home_number_then_sethome_take_handoffs(
    hermes_env: dict[str, str], redis_url: str, daemon: FakeSignalDaemon
) -> None:
    home = "+15557770777"
    settings = signal_settings(hermes_env, redis_url, daemon, home_channel=home)
    store = open_store(settings.resolved_database_url)
    try:
        with fleet(settings, store):
            # Nobody has written yet: the configured number is the fallback (no threads here).
            _from_the_terminal(settings, store, 1, "plan my trip")
            _from_the_terminal(settings, store, 2, "/handoff signal")
            wait_for(lambda: len(daemon.sent(home)) >= 2, timeout=90)
            daemon.deliver(envelope("/sethome", timestamp=1_700_000_000_020))
            wait_for(lambda: len(daemon.sent(USER)) >= 1, timeout=90)
            _from_the_terminal(settings, store, 3, "/handoff signal")
            wait_for(lambda: len(daemon.sent(USER)) >= 3, timeout=90)
            with store.read() as conn:
                stored = chats.get_home_channel(conn, "signal")
    finally:
        store.close()
    to_home = texts(daemon, home)
    assert len(to_home) == 2 and to_home[0].startswith("↻ Continuing session ")
    assert texts(daemon, USER)[0] == (
        "This chat is now the signal home channel: notices and hand-offs come here."
    )
    assert texts(daemon, USER)[1].startswith("↻ Continuing session ")
    assert stored is not None and (stored.chat_id, stored.chat_type) == (USER, "dm")
