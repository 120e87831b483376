"""Teams delivery through the real sender (httpx) against a fake Bot Connector on 127.0.0.1,
on real Redis and a real store: the bot token asked for once and again after a 401, split
replies in order, 429 cooldowns, a removed bot, server errors retried, hand-offs opening a
reply chain in a channel (the conversation itself elsewhere), /sethome, and attachments fetched
only from the platform's hosts."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from producers.intake import accept
from shared.db import Store, open_store
from shared.pipeline import outbox
from shared.platforms.teams import SERVICE_URL_CURSOR
from shared.settings import Settings, load_settings
from shared.store import chats, cursors
from shared.turns import Attachment
from tests.fakes.bot_connector import FakeBotConnector
from tests.fakes.delivery import delivery_runtime, reply, row
from tests.fakes.stack import redis_db_url
from tests.pipeline_helpers import turn
from workers.delivery.base import MemorySender
from workers.delivery.fetch import FetchFailed
from workers.delivery.teams import BotToken, TeamsFetcher
from workers.drain import drain
from workers.flush import MAX_SEND_ATTEMPTS, flush
from workers.handoff import run_handoff

pytestmark = pytest.mark.both_databases

APP_ID = "3f1c6c1e-7c2a-4f0b-9d47-2b5f0a6c8e11"
PASSWORD = "teams-delivery-app-password"
DM = "a:1Dy3ffTjWsJnAbfmsSsKyrQqmx0fJ9cErqvmCpJyP43Gwkq"
CHANNEL = "19:a1b2c3d4e5f60718293a4b5c6d7e8f90@thread.tacv2"


@pytest.fixture
def bot() -> Iterator[FakeBotConnector]:
    with FakeBotConnector(APP_ID, PASSWORD) as fake:
        yield fake


def teams_settings(
    hermes_env: dict[str, str], redis_url: str, bot: FakeBotConnector, **extra: str
) -> Settings:
    return load_settings(
        {**hermes_env, "HERMES_BROKER_URL": redis_db_url(redis_url), **bot.settings(), **extra}
    )


@pytest.fixture
def teams(hermes_env: dict[str, str], redis_url: str, bot: FakeBotConnector) -> Settings:
    return teams_settings(hermes_env, redis_url, bot)


@pytest.fixture
def teams_store(teams: Settings) -> Iterator[Store]:
    store = open_store(teams.resolved_database_url)
    yield store
    store.close()


def test_a_long_reply_is_split_in_order_answering_the_user_once(
    teams: Settings, teams_store: Store, bot: FakeBotConnector
) -> None:
    long = "\n\n".join(f"Paragraph {n}: " + "word " * 1500 for n in range(4))  # ~30,000 chars
    with delivery_runtime(teams, teams_store) as (rt, _):
        row_id = reply(teams_store, "teams", DM, long, reply_to="1733318400123")
        assert flush(rt, f"teams:{DM}").sent == 1
    sent = bot.sent(DM)
    assert len(sent) >= -(-len(long) // 6000) > 1
    assert all(len(p.body["text"]) <= 6000 for p in sent)
    assert " ".join(p.body["text"] for p in sent).split() == long.split()
    assert sent[0].reply_to == "1733318400123"
    assert all(p.reply_to is None and "replyToId" not in p.body for p in sent[1:])
    assert bot.token_requests == 1
    done = row(teams_store, row_id)
    assert done.status == outbox.SENT and done.platform_message_id is not None
    assert len(done.platform_message_id.split(",")) == len(sent)


def test_a_429_cools_the_conversation_and_a_removed_bot_fails_once(
    teams: Settings, teams_store: Store, bot: FakeBotConnector
) -> None:
    bot.script(DM, "429")
    bot.script(CHANNEL, "403")
    with delivery_runtime(teams, teams_store) as (rt, _):
        first = reply(teams_store, "teams", DM, "one")
        result = flush(rt, f"teams:{DM}")
        assert result.reason == "cooldown" and result.retry_in == pytest.approx(1, abs=0.1)
        assert row(teams_store, first).attempts == 0  # a wait, not a failure
        gone = reply(teams_store, "teams", CHANNEL, "to a team that removed the bot")
        flush(rt, f"teams:{CHANNEL}")
        time.sleep(1.05)
        assert flush(rt, f"teams:{DM}").sent == 1
    failed = row(teams_store, gone)
    assert failed.status == outbox.FAILED and failed.attempts == 1
    assert "403" in (failed.error or "") and "BotNotInConversationRoster" in (failed.error or "")
    assert bot.texts(DM) == ["one"]


def test_a_server_error_is_retried_and_sent_once(
    teams: Settings, teams_store: Store, bot: FakeBotConnector
) -> None:
    bot.script(DM, "500")
    with delivery_runtime(teams, teams_store) as (rt, _):
        row_id = reply(teams_store, "teams", DM, "hello")
        assert flush(rt, f"teams:{DM}").reason == "retry"
        with teams_store.write() as conn:  # skip the wait
            conn.execute(text("UPDATE outbox SET not_before = NULL"))
        assert flush(rt, f"teams:{DM}").sent == 1
    assert bot.texts(DM) == ["hello"] and row(teams_store, row_id).status == outbox.SENT


def test_a_refused_token_is_asked_for_again(bot: FakeBotConnector) -> None:
    token = BotToken(app_id=APP_ID, password=PASSWORD, token_url=bot.token_endpoint)
    assert token.get() == token.get() == bot.bot_token
    assert bot.token_requests == 1
    token.forget()
    assert token.get() == bot.bot_token and bot.token_requests == 2
    wrong = BotToken(app_id=APP_ID, password="wrong", token_url=bot.token_endpoint)
    with pytest.raises(Exception, match="401 without a token"):
        wrong.get()


def test_a_handoff_to_a_channel_opens_a_reply_chain_and_to_a_chat_uses_the_chat(
    hermes_env: dict[str, str], redis_url: str, teams_store: Store, bot: FakeBotConnector
) -> None:
    for home, expect_chain in ((CHANNEL, True), (DM, False)):
        settings = teams_settings(
            hermes_env, redis_url, bot, HERMES_PLATFORMS__TEAMS__HOME_CHANNEL=home
        )
        with delivery_runtime(settings, teams_store) as (rt, waker):
            rt.senders.add(MemorySender("telegram"))
            source = turn(
                1 if expect_chain else 2,
                "111",
                platform="telegram",
                text="/handoff teams",
                user_id="111",
            )
            talk = accept(teams_store, rt.waker, source, settings=settings, clock=time.time)
            drain(rt, talk.session_key)
            (handoff_id, _), *_ = reversed(waker.handoffs)
            assert run_handoff(rt, handoff_id).outcome == "completed"
            lanes = {r[0] for r in waker.deliveries}
            for lane in lanes:
                flush(rt, lane)
        if expect_chain:
            (root,) = bot.sent(CHANNEL)
            assert root.body["text"].startswith("🧵 ") and root.reply_to is None
            chain = bot.sent(f"{CHANNEL};messageid=1733300000001")
            assert chain and chain[0].body["text"].startswith("↻ Continuing session ")
        else:
            assert bot.texts(DM)[0].startswith("↻ Continuing session ")


def test_sethome_in_a_channel_thread_keeps_the_thread(
    teams: Settings, teams_store: Store, bot: FakeBotConnector
) -> None:
    with delivery_runtime(teams, teams_store) as (rt, _):
        home = turn(
            1,
            CHANNEL,
            platform="teams",
            chat_type="channel",
            thread_id="1733318600789",
            message_id="1733318600789",
            text="/sethome",
        )
        accepted = accept(teams_store, rt.waker, home, settings=teams, clock=time.time)
        drain(rt, accepted.session_key)
        flush(rt, f"teams:{CHANNEL}")
        with teams_store.read() as conn:
            stored = chats.get_home_channel(conn, "teams")
    assert stored is not None
    assert (stored.chat_id, stored.chat_type, stored.thread_id) == (
        CHANNEL,
        "channel",
        "1733318600789",
    )
    (answer,) = bot.sent(f"{CHANNEL};messageid=1733318600789")
    assert answer.body["text"].startswith("This chat is now the teams home channel")


def test_attachments_come_only_from_the_platforms_hosts_with_the_token_only_there(
    bot: FakeBotConnector,
) -> None:
    bot.files["img-1"] = (b"\x89PNG fake", "image/png")
    token = BotToken(app_id=APP_ID, password=PASSWORD, token_url=bot.token_endpoint)
    fetcher = TeamsFetcher(token=token, api_base=bot.service_url)
    ours = Attachment("image", url=f"{bot.service_url}v3/attachments/img-1/views/original")
    assert fetcher.fetch(ours, 1_000_000) == b"\x89PNG fake"
    assert bot.downloads == ["img-1"]
    for url in (
        "https://attacker.example/v3/attachments/x/views/original",
        "http://contoso.sharepoint.com/file.pdf",  # not https
        "https://sharepoint.com.attacker.example/file.pdf",
        "ftp://smba.trafficmanager.net/x",
    ):
        with pytest.raises(FetchFailed, match="not a Teams or SharePoint host"):
            fetcher.fetch(Attachment("document", url=url), 1_000_000)
    with pytest.raises(FetchFailed, match="over the 4-byte limit"):
        fetcher.fetch(ours, 4)


def test_a_server_error_backs_off_and_a_row_that_keeps_failing_dies_after_the_bound(
    teams: Settings, teams_store: Store, bot: FakeBotConnector
) -> None:
    bot.script(DM, *["500"] * MAX_SEND_ATTEMPTS)
    with delivery_runtime(teams, teams_store) as (rt, _):
        row_id = reply(teams_store, "teams", DM, "never lands")
        waits = []
        while row(teams_store, row_id).status == outbox.PENDING and len(bot.posted) < 20:
            before = time.time()
            result = flush(rt, f"teams:{DM}")
            if result.reason == "cooldown":  # the conversation's bucket (7 at once, 0.5/s)
                time.sleep(result.retry_in or 0)
                continue
            found = row(teams_store, row_id)
            if found.not_before is not None and found.status == outbox.PENDING:
                waits.append(found.not_before - before)
            with teams_store.write() as conn:  # skip the wait
                conn.execute(text("UPDATE outbox SET not_before = NULL"))
    dead = row(teams_store, row_id)
    assert dead.status == outbox.FAILED
    gave_up = f"gave up after {MAX_SEND_ATTEMPTS} attempts: SendFailed: teams 500"
    assert gave_up in (dead.error or "")
    assert waits == sorted(waits) and waits[0] < waits[-1]  # the backoff grows
    assert len(bot.posted) == MAX_SEND_ATTEMPTS and bot.sent(DM) == []


def test_replies_follow_the_service_url_stored_for_each_conversation(
    hermes_env: dict[str, str], redis_url: str, teams_store: Store, bot: FakeBotConnector
) -> None:
    with teams_store.write() as conn:
        cursors.save(conn, "teams", SERVICE_URL_CURSOR + DM, bot.service_url_of("emea"))
        cursors.save(conn, "teams", SERVICE_URL_CURSOR + CHANNEL, "https://attacker.example/")
    for follow in (True, False):
        settings = teams_settings(
            hermes_env,
            redis_url,
            bot,
            HERMES_PLATFORMS__TEAMS__REPLY_TO_SERVICE_URL=str(follow).lower(),
        )
        with delivery_runtime(settings, teams_store) as (rt, _):
            reply(teams_store, "teams", DM, f"follow={follow}")
            reply(teams_store, "teams", CHANNEL, f"channel follow={follow}")
            assert flush(rt, f"teams:{DM}").sent == 1
            assert flush(rt, f"teams:{CHANNEL}").sent == 1
    regions = {p.body["text"]: p.region for p in bot.sent()}
    assert regions == {
        "follow=True": "emea",  # the conversation's own service URL
        "follow=False": "amer",  # api_base overrides (a proxy)
        "channel follow=True": "amer",  # a URL the settings do not allow is never used
        "channel follow=False": "amer",
    }
