"""Discord delivery over REST against the fake, on real Redis: replies, threads, splits,
per-route and global 429s, the spent bucket in the headers, 403, drops, nonces."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from shared.db import Store, open_store
from shared.pipeline import outbox
from shared.platforms.discord import PLATFORM
from shared.settings import Settings, load_settings
from tests.fakes.delivery import delivery_runtime, reply, row
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.stack import redis_db_url
from workers.flush import flush

DISCORD_LIMIT = PLATFORM.message_limit

TOKEN = "OTAw.fake-discord-token.SecretPart"


@pytest.fixture
def fake() -> Iterator[FakeDiscord]:
    with FakeDiscord(TOKEN) as server:
        yield server


@pytest.fixture
def dc(hermes_env: dict[str, str], redis_url: str, fake: FakeDiscord) -> Settings:
    return load_settings(
        {
            **hermes_env,
            "HERMES_BROKER_URL": redis_db_url(redis_url),
            "HERMES_PLATFORMS__DISCORD__TOKEN": TOKEN,
            "HERMES_PLATFORMS__DISCORD__API_BASE": fake.api_base,
        }
    )


@pytest.fixture
def dc_store(dc: Settings) -> Iterator[Store]:
    store = open_store(dc.resolved_database_url)
    yield store
    store.close()


def test_a_thread_reply_is_split_and_references_the_message(
    dc: Settings, dc_store: Store, fake: FakeDiscord
) -> None:
    long = " ".join(["word"] * 900)  # 4,499 characters: three parts
    with delivery_runtime(dc, dc_store) as (rt, _):
        reply(dc_store, "discord", "500", long, thread_id="510", reply_to="1320")
        assert flush(rt, "discord:500").sent == 1
    sent = fake.sent("510")
    assert len(sent) == 3 and all(len(p["content"]) <= DISCORD_LIMIT for p in sent)
    assert sent[0]["message_reference"] == {"message_id": "1320", "fail_if_not_exists": False}
    assert all("message_reference" not in p for p in sent[1:])
    assert all(p["allowed_mentions"] == {"parse": []} and p["enforce_nonce"] for p in sent)
    assert len({p["nonce"] for p in sent}) == 3


def test_route_and_global_429s_and_the_spent_bucket(
    dc: Settings, dc_store: Store, fake: FakeDiscord
) -> None:
    fake.script("429:0.5", "empty", "429g:0.5", "ok")
    with delivery_runtime(dc, dc_store) as (rt, _):
        reply(dc_store, "discord", "600", "one")
        assert flush(rt, "discord:600").retry_in == 0.5
        time.sleep(0.55)
        reply(dc_store, "discord", "600", "two")
        result = flush(rt, "discord:600")  # "one" sent; the headers say the bucket is spent
        assert result.sent == 1 and result.reason == "cooldown"
        assert 1.0 < (result.retry_in or 0) <= 1.5
        reply(dc_store, "discord", "601", "elsewhere")
        assert flush(rt, "discord:601").retry_in == 0.5  # a global 429 …
        reply(dc_store, "discord", "602", "anywhere")
        assert flush(rt, "discord:602").reason == "cooldown"  # … holds every channel
    assert [p["content"] for p in fake.sent()] == ["one"]


def test_403_fails_and_a_drop_is_retried_without_a_duplicate(
    dc: Settings, dc_store: Store, fake: FakeDiscord
) -> None:
    fake.script("403", "drop")
    with delivery_runtime(dc, dc_store) as (rt, _):
        blocked = reply(dc_store, "discord", "700", "hi")
        assert flush(rt, "discord:700").reason == "idle"
        dropped = reply(dc_store, "discord", "701", "hello")
        assert flush(rt, "discord:701").reason == "retry"
        with dc_store.write() as conn:
            conn.execute(text("UPDATE outbox SET not_before = NULL"))
            conn.execute(text("UPDATE leases SET cooldown_until = NULL"))
        assert flush(rt, "discord:701").sent == 1
    assert row(dc_store, blocked).status == outbox.FAILED
    assert "50007" in (row(dc_store, blocked).error or "")
    assert row(dc_store, dropped).status == outbox.SENT
    assert [p["content"] for p in fake.sent("701")] == ["hello"]
