"""Hostile webhook bodies (issue 21, items 1, 2 and 10): answered 2xx/4xx, never 503, and a
long-polling receiver never stalls behind one update.

A 503 is what a platform redelivers for days; these inputs are the caller's, not a busy store.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from producers.gateway.deps import Gateway
from producers.slack.signature import sign
from producers.telegram.receiver import TelegramPoller, TelegramReceiver
from shared.db import Store, open_store
from shared.ports import RecordingWaker
from shared.settings import Settings, load_settings
from tests.fakes.background import Background
from tests.fakes.golden import load
from tests.fakes.stack import wait_for
from tests.fakes.telegram_api import FakeTelegram
from tests.integration.webhook_kit import (
    SLACK_SECRET,
    TG_SECRET,
    TG_TOKEN,
    inbox_texts,
    served,
    webhook_settings,
)

TG_HEADERS = {"X-Telegram-Bot-Api-Secret-Token": TG_SECRET, "Content-Type": "application/json"}
REPLACEMENT = "\ufffd"


@pytest.fixture
def settings(hermes_env: dict[str, str]) -> Settings:
    return webhook_settings(hermes_env)


@pytest.fixture
def hostile_store(settings: Settings) -> Iterator[Store]:
    store = open_store(settings.resolved_database_url)
    yield store
    store.close()


@pytest.fixture
def client(settings: Settings, hostile_store: Store) -> Iterator[TestClient]:
    with served(settings, hostile_store) as client:
        yield client


def tg_update(number: int = 700000001, **message: Any) -> dict[str, Any]:
    payload, _ = load("telegram", "private")
    data = copy.deepcopy(dict(payload))
    data["update_id"] = number
    data["message"].update(message)
    return data


def slack_headers(body: bytes, timestamp: str | None = None) -> dict[str, str]:
    stamp = timestamp or str(int(time.time()))
    return {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": sign(SLACK_SECRET, stamp, body),
        "Content-Type": "application/json",
    }


# --- lone surrogates and NUL: stored with U+FFFD in their place, the rest of the text kept ---


@pytest.mark.parametrize(
    ("raw", "stored"),
    [
        (b'"half \\ud800 a pair"', f"half {REPLACEMENT} a pair"),  # escaped
        (b'"low \\udfff end"', f"low {REPLACEMENT} end"),
        (b'"cesu \xed\xa0\x80 bytes"', f"cesu {REPLACEMENT} bytes"),  # CESU-8 on the wire
        (b'"nul \\u0000 inside"', f"nul {REPLACEMENT} inside"),  # PostgreSQL refuses NUL in text
        (b'"pair \\ud83d\\ude00 kept"', "pair \U0001f600 kept"),  # a whole pair is a character
    ],
)
def test_telegram_text_that_cannot_be_stored_as_is_is_stored_repaired(
    client: TestClient, hostile_store: Store, raw: bytes, stored: str
) -> None:
    body = json.dumps(tg_update(text="PLACEHOLDER")).encode().replace(b'"PLACEHOLDER"', raw)
    answer = client.post("/telegram/webhook", content=body, headers=TG_HEADERS)
    assert answer.status_code == 200, answer.text
    assert inbox_texts(hostile_store) == [stored]


def test_slack_text_with_a_lone_surrogate_is_stored_repaired(
    client: TestClient, hostile_store: Store
) -> None:
    payload, _ = load("slack", "dm")
    event = copy.deepcopy(payload)
    event["event"]["text"] = "slack \ud800 text"
    body = json.dumps(event).encode()
    answer = client.post("/slack/events", content=body, headers=slack_headers(body))
    assert answer.status_code == 200, answer.text
    assert inbox_texts(hostile_store) == [f"slack {REPLACEMENT} text"]


# --- shapes that are not events: 400, nothing stored ---


@pytest.mark.parametrize("route", ["/telegram/webhook", "/slack/events"])
def test_json_nested_past_the_parsers_depth_is_a_400(
    client: TestClient, hostile_store: Store, route: str
) -> None:
    body = b'{"a":' + b"[" * 5000 + b"]" * 5000 + b"}"
    headers = TG_HEADERS if route.startswith("/telegram") else slack_headers(body)
    answer = client.post(route, content=body, headers=headers)
    assert (answer.status_code, answer.json()["error"]) == (400, "JSON nested too deep")
    assert inbox_texts(hostile_store) == []


@pytest.mark.parametrize(
    ("field", "value"),
    [("type", ["message"]), ("type", {"k": "message"}), ("subtype", ["file_share"])],
)
def test_a_slack_event_field_of_the_wrong_type_is_a_400(
    client: TestClient, hostile_store: Store, field: str, value: Any
) -> None:
    payload, _ = load("slack", "dm")
    event = copy.deepcopy(payload)
    event["event"][field] = value
    body = json.dumps(event).encode()
    answer = client.post("/slack/events", content=body, headers=slack_headers(body))
    assert answer.status_code == 400
    assert f"event.{field} must be a string" in answer.json()["error"]
    assert inbox_texts(hostile_store) == []


@pytest.mark.parametrize("stamp", ["9" * 310, "1e10", "+1700000000", "-1700000000", " 17"])
def test_a_slack_timestamp_that_is_not_unix_time_is_a_401_without_an_error_logged(
    client: TestClient, hostile_store: Store, caplog: pytest.LogCaptureFixture, stamp: str
) -> None:
    body = json.dumps(load("slack", "dm")[0]).encode()
    caplog.set_level(logging.WARNING)
    answer = client.post("/slack/events", content=body, headers=slack_headers(body, stamp))
    assert answer.status_code == 401
    assert "not a number of seconds (Unix time)" in answer.json()["error"]
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert inbox_texts(hostile_store) == []


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("message", "message_thread_id"), "x"),
        (("message", "message_thread_id"), "12abc"),
        (("message", "chat", "id"), "not-a-chat"),
        (("message", "from", "id"), 1.5),
    ],
)
def test_a_telegram_id_that_is_not_an_integer_is_a_400(
    client: TestClient, hostile_store: Store, path: tuple[str, ...], value: Any
) -> None:
    update = tg_update(text="in a topic", is_topic_message=True, message_thread_id=7)
    node = update
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    answer = client.post("/telegram/webhook", json=update, headers=TG_HEADERS)
    assert answer.status_code == 400
    assert "must be an integer id" in answer.json()["error"]
    assert inbox_texts(hostile_store) == []


# --- long polling: one update never holds back the ones behind it ---


def polling(
    hermes_env: dict[str, str], store: Store, fake: FakeTelegram
) -> tuple[Gateway, TelegramPoller]:
    settings = load_settings({**hermes_env, "HERMES_PLATFORMS__TELEGRAM__TOKEN": TG_TOKEN})
    gateway = Gateway(settings, store, RecordingWaker(), time.time)
    receiver = TelegramReceiver(gateway, token=TG_TOKEN, secret=None)
    return gateway, TelegramPoller(receiver, token=TG_TOKEN, api_base=fake.api_base, timeout=1)


@pytest.mark.timeout(60)
def test_polling_moves_past_an_unstorable_update_and_records_the_rest(
    hermes_env: dict[str, str], store: Store
) -> None:
    with FakeTelegram(TG_TOKEN) as fake:
        fake.add_update(tg_update(20, text="before"))
        fake.add_update(tg_update(21, text="broken \ud800 half", message_id=31))
        fake.add_update(tg_update(22, text="after", message_id=32))
        _, poller = polling(hermes_env, store, fake)
        with Background(poller.run):
            wait_for(lambda: poller.offset == 23, timeout=30)
    assert inbox_texts(store) == ["before", f"broken {REPLACEMENT} half", "after"]


@pytest.mark.timeout(60)
def test_polling_skips_an_update_that_fails_the_same_way_every_time(
    hermes_env: dict[str, str],
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with FakeTelegram(TG_TOKEN) as fake:
        fake.add_update(tg_update(40, text="poison", message_id=41))
        fake.add_update(tg_update(42, text="behind it", message_id=43))
        gateway, poller = polling(hermes_env, store, fake)
        real = gateway.record

        async def refuses_poison(turn: Any) -> Any:
            if turn.text == "poison":
                raise ValueError("a value no database takes")
            return await real(turn)

        monkeypatch.setattr(gateway, "record", refuses_poison)
        with Background(poller.run):
            wait_for(lambda: poller.offset == 43, timeout=30)
    assert inbox_texts(store) == ["behind it"]
    assert any("update 40 cannot be recorded" in r.getMessage() for r in caplog.records)
