"""Teams end to end: Bot Framework activities over real HTTP into the real gateway app
(uvicorn), their JWTs checked by botframework-connector against a fake Bot Framework's OpenID
metadata and JWKS (an RSA key made in the test), recorded in state.db, drained by a real Celery
worker on real Redis, and the replies sent by the real sender to the fake Bot Connector with a
bot token from its token endpoint: once each, in reply to the user's message, in the channel's
reply chain, split at 6,000 characters; images fetched with the bot token; /title and /new;
forged, unsigned and misaddressed tokens and malformed bodies refused with nothing stored."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from celery.contrib.testing.worker import start_worker
from sqlalchemy import text

from producers.broker import BrokerWaker, broker_client
from producers.gateway.app import create_app
from producers.gateway.deps import Gateway
from shared.db import Store, open_store
from shared.settings import load_settings
from tests.fakes.bot_connector import FakeBotConnector
from tests.fakes.golden import load
from tests.fakes.openai_server import running
from tests.fakes.server import Served
from tests.fakes.stack import redis_db_url, wait_for
from tests.integration.test_agent_media import PNG
from workers.app import create_app as create_celery_app

pytestmark = pytest.mark.both_databases

APP_ID = "3f1c6c1e-7c2a-4f0b-9d47-2b5f0a6c8e11"
PASSWORD = "teams-e2e-app-password"
REDIS_DB = 13
OFFLINE = "[offline model] I am the offline model (no model endpoint is configured), "
DM = (
    "a:1Dy3ffTjWsJnAbfmsSsKyrQqmx0fJ9cErqvmCpJyP43Gwkq_E-yzDhZ2mD6yBrqK4kq0ELiHw6nCrSKt4bGjA4m"
    "BNtSdvaS3Y8WQm1eFhgYdu1CB1Ak7Z1ECsqNwO1qDe"
)
GROUP = "19:7c2b1a9d4e3f4b8a9c6d2e1f0a3b5c7d@thread.v2"
CHANNEL = "19:a1b2c3d4e5f60718293a4b5c6d7e8f90@thread.tacv2"
USER = "5b2b8c2e-0e6c-4f4a-8f3a-1d9a4c6e7f01"
TABLES = ("inbox", "routes", "sessions", "outbox", "platform_cursors")  # + service URLs


@dataclass
class Stack:
    base: str
    bot: FakeBotConnector
    store: Store

    def post(self, activity: Any, token: str | None = "good", **headers: str) -> httpx.Response:
        body = activity if isinstance(activity, bytes) else json.dumps(activity).encode()
        sent = {"Content-Type": "application/json", **headers}
        if token == "good":
            sent["Authorization"] = f"Bearer {self.bot.token()}"
        elif token is not None:
            sent["Authorization"] = token
        return httpx.post(f"{self.base}/teams/messages", content=body, headers=sent, timeout=10)

    def settled(self) -> bool:
        with self.store.read() as conn:
            open_turns = conn.execute(
                text("SELECT count(*) FROM inbox WHERE status IN ('waiting', 'running')")
            ).scalar_one()
            pending = conn.execute(
                text("SELECT count(*) FROM outbox WHERE status = 'pending'")
            ).scalar_one()
        return open_turns == 0 and pending == 0

    def scalar(self, sql: str) -> Any:
        with self.store.read() as conn:
            return conn.execute(text(sql)).scalar_one()

    def column(self, sql: str) -> list[Any]:
        with self.store.read() as conn:
            return list(conn.execute(text(sql)).scalars())

    def stored(self) -> list[int]:
        return [self.scalar(f"SELECT count(*) FROM {t}") for t in TABLES]


@contextmanager
def teams_stack(
    env: dict[str, str], redis_url: str, bot: FakeBotConnector, **extra: str
) -> Iterator[Stack]:
    settings = load_settings(
        {**env, "HERMES_BROKER_URL": redis_db_url(redis_url, REDIS_DB), **bot.settings(), **extra}
    )
    store = open_store(settings.resolved_database_url)
    celery = create_celery_app(settings)
    producer = broker_client(settings)
    gateway = Gateway(settings, store, BrokerWaker(producer), time.time)
    try:
        with (
            start_worker(celery, pool="threads", concurrency=4, perform_ping_check=False),
            Served(create_app(gateway)) as base,
        ):
            yield Stack(base, bot, store)
    finally:
        celery.hermes_runtimes.close()
        producer.close()
        store.close()


@pytest.fixture
def bot() -> Iterator[FakeBotConnector]:
    with FakeBotConnector(APP_ID, PASSWORD) as fake:
        yield fake


def activity(bot: FakeBotConnector, name: str, **changes: Any) -> dict[str, Any]:
    payload, _ = load("teams", name)
    found = copy.deepcopy(dict(payload))
    found["serviceUrl"] = bot.service_url
    found["recipient"]["id"] = f"28:{APP_ID}"
    for entity in found.get("entities", []):
        if entity.get("type") == "mention" and entity["mentioned"]["id"].startswith("28:"):
            entity["mentioned"]["id"] = f"28:{APP_ID}"
    found.update(changes)
    return found


def said(bot: FakeBotConnector, text_: str, activity_id: str) -> dict[str, Any]:
    return activity(bot, "personal_text", text=text_, id=activity_id)


@pytest.mark.timeout(300)
def test_dm_group_and_channel_turns_are_answered_once_in_reply(
    hermes_env: dict[str, str], redis_url: str, bot: FakeBotConnector
) -> None:
    chain = f"{CHANNEL};messageid=1733318600789"
    with teams_stack(hermes_env, redis_url, bot) as stack:
        health = httpx.get(f"{stack.base}/healthz", timeout=10).json()
        assert health["receivers"] == ["teams"]
        assert stack.post(activity(bot, "personal_text")).status_code == 200
        assert stack.post(activity(bot, "personal_redelivered")).status_code == 200
        assert stack.post(activity(bot, "group_mention")).status_code == 200
        assert stack.post(activity(bot, "channel_new_post")).status_code == 200
        assert stack.post(activity(bot, "conversation_update")).status_code == 200
        wait_for(lambda: bot.sent(DM) and bot.sent(GROUP) and bot.sent(chain), timeout=90)
        wait_for(stack.settled, timeout=90)
        turns = stack.scalar("SELECT count(*) FROM inbox")
        keys = sorted(stack.column("SELECT session_key FROM routes"))
    assert turns == 3  # the redelivered activity and the conversationUpdate stored nothing
    assert keys == [
        f"agent:main:teams:channel:{CHANNEL.replace(':', '%3A')}:1733318600789",
        f"agent:main:teams:dm:{DM.replace(':', '%3A')}",
        f"agent:main:teams:group:{GROUP.replace(':', '%3A')}:{USER}",
    ]
    (reply,) = bot.sent(DM)
    assert reply.body["text"] == OFFLINE + "so I can only echo: " + (
        "Can you summarise yesterday's incident review?"
    )
    assert reply.reply_to == "1733318400123" and reply.body["replyToId"] == "1733318400123"
    assert reply.authorization == f"Bearer {bot.bot_token}"
    (in_group,) = bot.sent(GROUP)
    assert in_group.body["text"].endswith("echo: what did Adele Vance decide about the rollout?")
    (in_channel,) = bot.sent(chain)  # in the post's reply chain, answering the post
    assert in_channel.reply_to == "1733318600789"
    assert in_channel.body["text"].endswith("echo: draft the release notes for 4.2")
    assert bot.token_requests == 1  # one bot token, reused by every send


@pytest.mark.timeout(300)
def test_forged_unsigned_misaddressed_and_malformed_requests_store_nothing(
    hermes_env: dict[str, str], redis_url: str, bot: FakeBotConnector
) -> None:
    good = activity(bot, "personal_text")
    with teams_stack(hermes_env, redis_url, bot) as stack:
        unsigned = stack.post(good, token=None)
        forged = stack.post(good, token=f"Bearer {bot.forged()}")
        wrong_audience = stack.post(good, token=f"Bearer {bot.token(aud='someone-elses-bot')}")
        expired = stack.post(good, token=f"Bearer {bot.token(exp=int(time.time()) - 3600)}")
        wrong_issuer = stack.post(good, token=f"Bearer {bot.token(iss='https://evil.example')}")
        other_service = stack.post(  # the token names another service URL than the body
            good, token=f"Bearer {bot.token(serviceurl='https://elsewhere.example/')}"
        )
        garbage = stack.post(good, token="Bearer not.a.jwt")
        basic = stack.post(good, token="Basic dXNlcjpwYXNz")
        refused = [unsigned, forged, wrong_audience, expired, wrong_issuer, other_service]
        refused += [garbage, basic]
        # signed, but the bodies are not activities this bot can take
        moved = f"Bearer {bot.token(serviceurl='https://attacker.example/')}"
        malformed = [
            stack.post(b"{not json"),
            stack.post(b"[1, 2]"),
            stack.post(b"\xff\xfe"),
            stack.post({**good, "conversation": "a:1"}),
            stack.post({**good, "id": None}),
            stack.post({**good, "text": 42}),
            stack.post({**good, "from": None}),
            stack.post(good, **{"Content-Type": "text/plain"}),
            stack.post({**good, "serviceUrl": None}),
            stack.post({**good, "serviceUrl": "https://attacker.example/"}, token=moved),
        ]
        stored = stack.stored()
    assert [r.status_code for r in refused[:1]] == [401]
    assert [r.status_code for r in refused[1:]] == [403] * 7, [r.text for r in refused]
    assert all(400 <= r.status_code < 500 for r in malformed), [
        (r.status_code, r.text) for r in malformed
    ]
    assert stored == [0, 0, 0, 0, 0] and bot.posted == []  # not even a service URL


@pytest.mark.timeout(300)
def test_a_stranger_is_refused_once_in_reply_and_nothing_runs(
    hermes_env: dict[str, str], redis_url: str, bot: FakeBotConnector
) -> None:
    with teams_stack(
        hermes_env, redis_url, bot, HERMES_PLATFORMS__TEAMS__ALLOWED_USERS="someone-else"
    ) as stack:
        assert stack.post(activity(bot, "personal_text")).status_code == 200
        wait_for(lambda: bot.sent(DM), timeout=30)
        stored = stack.stored()
    assert bot.texts(DM) == ["Sorry, this assistant is private."]
    assert bot.sent(DM)[0].reply_to == "1733318400123"
    assert stored == [0, 0, 0, 0, 0]


@pytest.mark.timeout(300)
def test_a_long_model_reply_is_split_at_6000_characters(
    hermes_env: dict[str, str], redis_url: str, bot: FakeBotConnector
) -> None:
    long = " ".join(f"sentence {n} of a long answer." for n in range(600))  # ~17,000 chars
    with (
        running() as model,  # the fake endpoint echoes the user's text back: a long reply
        teams_stack(
            hermes_env,
            redis_url,
            bot,
            HERMES_MODEL__BASE_URL=model.url,
            HERMES_MODEL__API_KEY="sk-test-not-secret",
            HERMES_MODEL__NAME="fake-main",
            HERMES_AUXILIARY__NAME="fake-aux",
        ) as stack,
    ):
        assert stack.post(said(bot, long, "1733319100555")).status_code == 200
        wait_for(lambda: bot.sent(DM), timeout=90)
        wait_for(stack.settled, timeout=90)
    parts = bot.sent(DM)
    assert len(parts) >= 3
    assert all(len(p.body["text"]) <= 6000 for p in parts)
    words = " ".join(p.body["text"] for p in parts).split()
    assert words[-len(long.split()) :] == long.split()  # the fake's echo, whole and in order
    assert parts[0].reply_to == "1733319100555"
    assert all(p.reply_to is None for p in parts[1:])


@pytest.mark.timeout(300)
def test_an_image_turn_title_and_new(
    hermes_env: dict[str, str], redis_url: str, bot: FakeBotConnector
) -> None:
    bot.files["img-0001"] = (PNG, "image/png")
    picture = activity(bot, "inline_image")
    picture["attachments"][0]["contentUrl"] = (
        f"{bot.service_url}v3/attachments/img-0001/views/original"
    )
    with teams_stack(hermes_env, redis_url, bot) as stack:
        assert stack.post(picture).status_code == 200
        wait_for(lambda: len(bot.sent(DM)) == 1, timeout=90)
        assert stack.post(said(bot, "/title Incident notes", "1733319200001")).status_code == 200
        wait_for(lambda: len(bot.sent(DM)) == 2, timeout=90)
        first_session = stack.scalar("SELECT id FROM sessions")
        assert stack.post(said(bot, "/new", "1733319200002")).status_code == 200
        wait_for(lambda: len(bot.sent(DM)) == 3, timeout=90)
        assert stack.post(said(bot, "a fresh start", "1733319200003")).status_code == 200
        wait_for(lambda: len(bot.sent(DM)) == 4, timeout=90)
        wait_for(stack.settled, timeout=90)
        sessions = stack.scalar("SELECT count(*) FROM sessions")
        title = stack.scalar(f"SELECT title FROM sessions WHERE id = '{first_session}'")
    image, titled, new, fresh = bot.texts(DM)
    assert image.startswith(OFFLINE + "so I can only echo: What is in this screenshot?")
    assert "Your attachments are noted" in image and "could not be read" not in image
    assert bot.downloads == ["img-0001"]  # fetched once, with the bot token
    assert titled == "Title set to 'Incident notes'."
    assert title == "Incident notes"
    assert new == "Started a new session."
    assert fresh.endswith("echo: a fresh start")
    assert sessions == 2


@pytest.mark.timeout(300)
def test_replies_go_to_each_activitys_service_url_and_only_allowed_ones_are_taken(
    hermes_env: dict[str, str], redis_url: str, bot: FakeBotConnector
) -> None:
    emea, apac, amer = (bot.service_url_of(r) for r in ("emea", "apac", "amer"))

    def at(url: str, name: str, **changes: Any) -> tuple[dict[str, Any], str]:
        return activity(bot, name, serviceUrl=url, **changes), f"Bearer {bot.token(serviceurl=url)}"

    with teams_stack(  # api_base is unreachable: every reply must go to its activity's URL
        hermes_env,
        redis_url,
        bot,
        HERMES_PLATFORMS__TEAMS__API_BASE="http://127.0.0.1:9/unreachable/",
        HERMES_PLATFORMS__TEAMS__SERVICE_URLS=f"{emea},{apac}",
    ) as stack:
        assert stack.post(*at(emea, "personal_text")).status_code == 200
        assert stack.post(*at(apac, "group_mention")).status_code == 200
        refused = stack.post(*at(amer, "channel_new_post"))  # signed, but not on the list
        wait_for(lambda: bot.sent(DM) and bot.sent(GROUP), timeout=90)
        wait_for(stack.settled, timeout=90)
        # the DM's tenant moved region: its next reply follows the newer activity
        moved = at(apac, "personal_text", id="1733318400999", text="and now?")
        assert stack.post(*moved).status_code == 200
        wait_for(lambda: len(bot.sent(DM)) == 2, timeout=90)
        turns = stack.scalar("SELECT count(*) FROM inbox")
    assert refused.status_code == 403 and "serviceUrl" in refused.text
    assert turns == 3  # the refused activity stored nothing
    assert [p.region for p in bot.sent(DM)] == ["emea", "apac"]
    assert [p.region for p in bot.sent(GROUP)] == ["apac"]
    assert [p for p in bot.posted if p.region == "amer"] == []
