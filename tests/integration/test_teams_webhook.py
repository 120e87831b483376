"""POST /teams/messages on the real gateway app and a real state.db, its tokens checked by
botframework-connector against a fake Bot Framework's keys: a token that passed is remembered
only for the service URL and channel it passed for, and an activity the store refuses is not
acked."""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text
from starlette.testclient import TestClient

from producers.gateway.app import create_app
from producers.gateway.deps import Gateway
from producers.teams.plugin import PLUGIN
from shared.db import Store, open_store
from shared.platforms.teams import SERVICE_URL_CURSOR, TEAMS, TeamsSettings
from shared.ports import RecordingWaker
from shared.settings import Settings, load_settings
from shared.store import cursors
from tests.fakes.bot_connector import FakeBotConnector
from tests.fakes.golden import load

pytestmark = pytest.mark.both_databases

APP_ID = "3f1c6c1e-7c2a-4f0b-9d47-2b5f0a6c8e11"


@pytest.fixture
def bot() -> Iterator[FakeBotConnector]:
    with FakeBotConnector(APP_ID, "teams-webhook-password") as fake:
        yield fake


@pytest.fixture
def teams_settings(hermes_env: dict[str, str], bot: FakeBotConnector) -> Settings:
    return load_settings({**hermes_env, **bot.settings()})


@pytest.fixture
def teams_store(teams_settings: Settings) -> Iterator[Store]:
    store = open_store(teams_settings.resolved_database_url)
    yield store
    store.close()


def activity(bot: FakeBotConnector, activity_id: str, **changes: Any) -> dict[str, Any]:
    payload, _ = load("teams", "personal_text")
    found = copy.deepcopy(dict(payload))
    found.update({"serviceUrl": bot.service_url, "id": activity_id, **changes})
    return found


def events(store: Store) -> list[str]:
    with store.read() as conn:
        return [str(e) for e in conn.execute(text("SELECT event_id FROM inbox")).scalars()]


def test_a_remembered_token_still_names_its_service_url_and_channel(
    teams_settings: Settings, teams_store: Store, bot: FakeBotConnector
) -> None:
    waker = RecordingWaker()
    token = {"Authorization": f"Bearer {bot.token()}"}
    app = create_app(Gateway(teams_settings, teams_store, waker, time.time))
    with TestClient(app) as client:
        first = client.post("/teams/messages", json=activity(bot, "1"), headers=token)
        again = client.post("/teams/messages", json=activity(bot, "2"), headers=token)
        moved = activity(bot, "3", serviceUrl=bot.service_url.replace("/amer/", "/emea/"))
        elsewhere = client.post("/teams/messages", json=moved, headers=token)
        other_channel = activity(bot, "4", channelId="webchat")
        not_teams = client.post("/teams/messages", json=other_channel, headers=token)
    assert (first.status_code, again.status_code) == (200, 200)
    assert elsewhere.status_code == 403  # the token's serviceurl claim names /amer/
    assert not_teams.status_code == 403  # the key is endorsed for msteams only
    assert sorted(e.rsplit("/", 1)[1] for e in events(teams_store)) == ["1", "2"]


@pytest.mark.parametrize("table", ["inbox", "platform_cursors"])  # the turn, its service URL
def test_an_activity_the_store_refuses_is_not_acked(
    teams_settings: Settings, teams_store: Store, bot: FakeBotConnector, table: str
) -> None:
    refuse = (
        [
            f"CREATE TRIGGER refuse BEFORE INSERT ON {table}"
            " BEGIN SELECT RAISE(ABORT, 'disk full'); END"
        ]
        if teams_store.dialect == "sqlite"
        else [
            "CREATE FUNCTION refuse() RETURNS trigger AS"
            " $$ BEGIN RAISE EXCEPTION 'disk full'; END $$ LANGUAGE plpgsql",
            f"CREATE TRIGGER refuse BEFORE INSERT ON {table}"
            " FOR EACH ROW EXECUTE FUNCTION refuse()",
        ]
    )
    with teams_store.write() as conn:
        for statement in refuse:
            conn.execute(text(statement))
    waker = RecordingWaker()
    app = create_app(Gateway(teams_settings, teams_store, waker, time.time))
    with TestClient(app) as client:
        answer = client.post(
            "/teams/messages",
            json=activity(bot, "1"),
            headers={"Authorization": f"Bearer {bot.token()}"},
        )
    assert answer.status_code == 503  # the Bot Framework retries; nothing was acked
    assert events(teams_store) == [] and waker.drains == []


def test_the_signing_keys_are_fetched_before_serving_and_a_failure_is_said(
    teams_settings: Settings,
    teams_store: Store,
    bot: FakeBotConnector,
    caplog: pytest.LogCaptureFixture,
) -> None:
    gateway = Gateway(teams_settings, teams_store, RecordingWaker(), time.time)
    conf = teams_settings.platforms.of("teams", TeamsSettings)
    asyncio.run(PLUGIN.starting(gateway, conf, {}))
    assert bot.key_fetches == 1
    with TestClient(create_app(gateway)) as client:  # the first activity finds them cached
        answer = client.post(
            "/teams/messages",
            json=activity(bot, "1"),
            headers={"Authorization": f"Bearer {bot.token()}"},
        )
    assert answer.status_code == 200 and bot.key_fetches == 1
    unreachable = conf.model_copy(update={"openid_metadata": "http://127.0.0.1:9/openid/none"})
    with caplog.at_level(logging.WARNING):
        asyncio.run(PLUGIN.starting(gateway, unreachable, {}))
    assert "the signing keys at http://127.0.0.1:9/openid/none could not be fetched" in caplog.text


def test_a_conversations_service_url_is_committed_with_its_turn(
    teams_settings: Settings, teams_store: Store, bot: FakeBotConnector
) -> None:
    """The URL goes in the turn's own transaction, ahead of it: a turn the store refuses leaves
    no URL behind, and its redelivery stores both."""
    with teams_store.write() as conn:
        conn.execute(
            text(
                "CREATE TRIGGER refuse BEFORE INSERT ON inbox"
                " BEGIN SELECT RAISE(ABORT, 'disk full'); END"
                if teams_store.dialect == "sqlite"
                else "CREATE FUNCTION refuse() RETURNS trigger AS"
                " $$ BEGIN RAISE EXCEPTION 'disk full'; END $$ LANGUAGE plpgsql"
            )
        )
        if teams_store.dialect != "sqlite":
            conn.execute(
                text(
                    "CREATE TRIGGER refuse BEFORE INSERT ON inbox"
                    " FOR EACH ROW EXECUTE FUNCTION refuse()"
                )
            )
    payload = activity(bot, "7")
    chat = payload["conversation"]["id"]
    app = create_app(Gateway(teams_settings, teams_store, RecordingWaker(), time.time))
    headers = {"Authorization": f"Bearer {bot.token()}"}

    def stored() -> str | None:
        with teams_store.read() as conn:
            return cursors.load(conn, TEAMS, SERVICE_URL_CURSOR + chat)

    with TestClient(app) as client:
        assert client.post("/teams/messages", json=payload, headers=headers).status_code == 503
        assert (events(teams_store), stored()) == ([], None)
        with teams_store.write() as conn:
            conn.execute(
                text(
                    "DROP TRIGGER refuse" + ("" if teams_store.dialect == "sqlite" else " ON inbox")
                )
            )
        assert client.post("/teams/messages", json=payload, headers=headers).status_code == 200
    assert (len(events(teams_store)), stored()) == (1, bot.service_url)
