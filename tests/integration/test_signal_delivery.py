"""Signal delivery through the real sender (httpx) against a fake signal-cli-rest-api daemon on
127.0.0.1, on real Redis and a real store, with the daemon's own answers (src/api/api.go,
SendV2): 201 `{"timestamp"}` on success; 400 `{"error"}` for any error signal-cli reports
(an unregistered recipient: failed once, clearly, never retried); 429 with challenge tokens
for Signal's rate limit (a wait that uses no attempt); a 5xx (a proxy, a daemon restarting)
retried with backoff and sent once. The body is SendMessageV2's: number, recipients, message,
quote_timestamp and quote_author."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from producers.signal.translate import group_chat_id
from shared.db import Store, open_store
from shared.pipeline import outbox
from shared.settings import Settings, load_settings
from tests.fakes.delivery import delivery_runtime, reply, row
from tests.fakes.signal_api import ACCOUNT, FakeSignalDaemon
from tests.fakes.stack import redis_db_url
from workers.flush import flush

pytestmark = pytest.mark.both_databases

USER = "+15557770001"
OTHER = "+15557770002"


@pytest.fixture
def daemon() -> Iterator[FakeSignalDaemon]:
    with FakeSignalDaemon() as fake:
        yield fake


@pytest.fixture
def signal_settings(
    hermes_env: dict[str, str], redis_url: str, daemon: FakeSignalDaemon
) -> Settings:
    return load_settings(
        {
            **hermes_env,
            "HERMES_BROKER_URL": redis_db_url(redis_url),
            "HERMES_PLATFORMS__SIGNAL__TOKEN": ACCOUNT,
            "HERMES_PLATFORMS__SIGNAL__API_BASE": daemon.api_base,
        }
    )


@pytest.fixture
def signal_store(signal_settings: Settings) -> Iterator[Store]:
    store = open_store(signal_settings.resolved_database_url)
    yield store
    store.close()


def test_the_body_is_send_v2s_and_quotes_the_users_message(
    signal_settings: Settings, signal_store: Store, daemon: FakeSignalDaemon
) -> None:
    with delivery_runtime(signal_settings, signal_store) as (rt, _):
        row_id = reply(signal_store, "signal", USER, "hi", reply_to=f"{USER}:1700000000123")
        assert flush(rt, f"signal:{USER}").sent == 1
    (body,) = daemon.sent(USER)
    assert body == {
        "number": ACCOUNT,
        "recipients": [USER],
        "message": "hi",
        "quote_timestamp": 1700000000123,
        "quote_author": USER,
    }
    assert row(signal_store, row_id).platform_message_id == "1800000000000"


def test_a_refused_send_fails_once_and_clearly_without_the_account_number(
    signal_settings: Settings, signal_store: Store, daemon: FakeSignalDaemon
) -> None:
    daemon.script_send("400")
    with delivery_runtime(signal_settings, signal_store) as (rt, _):
        refused = reply(signal_store, "signal", OTHER, "to nobody")
        assert flush(rt, f"signal:{OTHER}").reason == "idle"  # done with, not retried
        later = reply(signal_store, "signal", OTHER, "next one")
        assert flush(rt, f"signal:{OTHER}").sent == 1
    failed = row(signal_store, refused)
    assert failed.status == outbox.FAILED and failed.attempts == 1
    assert "signal 400" in (failed.error or "") and "not a registered user" in (failed.error or "")
    assert ACCOUNT not in (failed.error or "")
    assert [b["message"] for b in daemon.sent(OTHER)] == ["next one"]
    assert row(signal_store, later).status == outbox.SENT


def test_a_rate_limit_waits_without_using_an_attempt(
    signal_settings: Settings, signal_store: Store, daemon: FakeSignalDaemon
) -> None:
    daemon.script_send("429")
    with delivery_runtime(signal_settings, signal_store) as (rt, _):
        row_id = reply(signal_store, "signal", USER, "patience")
        result = flush(rt, f"signal:{USER}")
        assert result.reason == "cooldown" and (result.retry_in or 0) > 0
        waiting = row(signal_store, row_id)
    assert waiting.status == outbox.PENDING and waiting.attempts == 0
    assert "rate limit" in (waiting.error or "")
    assert daemon.sent(USER) == []


def test_a_server_error_is_retried_with_backoff_and_sent_once(
    signal_settings: Settings, signal_store: Store, daemon: FakeSignalDaemon
) -> None:
    daemon.script_send("500", "500")
    with delivery_runtime(signal_settings, signal_store) as (rt, _):
        row_id = reply(signal_store, "signal", USER, "eventually")
        waits = []
        for _ in range(2):
            result = flush(rt, f"signal:{USER}")
            assert result.reason == "retry"
            waits.append(result.retry_in or 0)
            with signal_store.write() as conn:  # skip the wait
                conn.execute(text("UPDATE outbox SET not_before = NULL"))
        assert flush(rt, f"signal:{USER}").sent == 1
    done = row(signal_store, row_id)
    assert waits[0] < waits[1]  # the backoff grows
    assert done.status == outbox.SENT and done.attempts == 3  # two failures, then the send
    assert [b["message"] for b in daemon.sent(USER)] == ["eventually"]


def test_a_group_is_addressed_by_its_send_id_and_a_bad_one_fails_clearly(
    signal_settings: Settings, signal_store: Store, daemon: FakeSignalDaemon
) -> None:
    group = group_chat_id(base64.b64encode(bytes(range(32))).decode())
    short = group_chat_id(base64.b64encode(b"not a signal group").decode())
    with delivery_runtime(signal_settings, signal_store) as (rt, _):
        sent = reply(signal_store, "signal", group, "hello group")
        refused = reply(signal_store, "signal", short, "hello nobody")
        assert flush(rt, f"signal:{group}").sent == 1
        flush(rt, f"signal:{short}")
    assert [b["recipients"] for b in daemon.sent()] == [[group]]
    assert row(signal_store, sent).status == outbox.SENT
    failed = row(signal_store, refused)
    assert failed.status == outbox.FAILED and "Invalid Signal group size (18" in (
        failed.error or ""
    )
