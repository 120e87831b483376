"""POST /telegram/webhook on a real state.db: secret checks, bad input, ignore-and-200, refusals."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text
from starlette.testclient import TestClient

from producers.gateway.app import create_app
from producers.gateway.body import MAX_BODY
from producers.gateway.deps import Gateway
from producers.gateway.port import stack_id
from shared.db import Store, open_store
from shared.ports import RecordingWaker
from shared.settings import Settings, load_settings
from shared.store import chats
from tests.fakes.golden import load

TOKEN = "123456789:AAFakeTokenForTests"
SECRET = "s3cret-Token_for-webhook"
URL = "/telegram/webhook"
HEADERS = {"X-Telegram-Bot-Api-Secret-Token": SECRET, "Content-Type": "application/json"}


@pytest.fixture
def tg_settings(hermes_env: dict[str, str]) -> Settings:
    return load_settings(
        {
            **hermes_env,
            "HERMES_PLATFORMS__TELEGRAM__TOKEN": TOKEN,
            "HERMES_PLATFORMS__TELEGRAM__WEBHOOK_SECRET": SECRET,
            "HERMES_PLATFORMS__TELEGRAM__USERNAME": "hermes_bot",
        }
    )


@pytest.fixture
def tg_store(tg_settings: Settings) -> Iterator[Store]:
    store = open_store(tg_settings.resolved_database_url)
    yield store
    store.close()


def client_for(settings: Settings, store: Store) -> tuple[TestClient, RecordingWaker]:
    waker = RecordingWaker()
    gateway = Gateway(settings, store, waker, time.time)
    return TestClient(create_app(gateway)), waker


def inbox(store: Store) -> list[tuple[str, str, str]]:
    with store.read() as conn:
        rows = conn.execute(text("SELECT event_id, session_key, text FROM inbox ORDER BY id"))
        return [tuple(r) for r in rows]  # type: ignore[misc]


def update(name: str) -> dict[str, Any]:
    payload, _ = load("telegram", name)
    return dict(payload)


def test_an_update_is_recorded_then_acked_and_a_redelivery_is_a_no_op(
    tg_settings: Settings, tg_store: Store
) -> None:
    client, waker = client_for(tg_settings, tg_store)
    with client:
        first = client.post(URL, json=update("private"), headers=HEADERS)
        again = client.post(URL, json=update("repeated_update_id"), headers=HEADERS)
    assert first.status_code == again.status_code == 200
    assert inbox(tg_store) == [
        ("123456789:700000001", "agent:main:telegram:dm:111111111", "hello there")
    ]
    assert waker.drains[0] == ("agent:main:telegram:dm:111111111", None)


@pytest.mark.parametrize(
    ("headers", "body", "status"),
    [
        ({"Content-Type": "application/json"}, b"{}", 401),
        ({**HEADERS, "X-Telegram-Bot-Api-Secret-Token": "wrong"}, b"{}", 401),
        ({**HEADERS, "X-Telegram-Bot-Api-Secret-Token": SECRET + "x"}, b"{}", 401),
        ({**HEADERS, "Content-Type": "text/plain"}, b"{}", 415),
        ({**HEADERS, "Content-Type": "application/x-www-form-urlencoded"}, b"a=1", 415),
        (HEADERS, b"{not json", 400),
        (HEADERS, b"\xff\xfe", 400),
        (HEADERS, b"[1, 2]", 400),
        (HEADERS, b'"update"', 400),
        (HEADERS, b"{}", 400),
        (HEADERS, b'{"update_id": "7"}', 400),
        (HEADERS, b'{"update_id": 7, "message": {"message_id": 1, "chat": 5}}', 400),
        (HEADERS, b"x" * (MAX_BODY + 1), 413),
    ],
)
def test_bad_input_is_4xx_and_records_nothing(
    tg_settings: Settings, tg_store: Store, headers: dict[str, str], body: bytes, status: int
) -> None:
    client, waker = client_for(tg_settings, tg_store)
    with client:
        response = client.post(URL, content=body, headers=headers)
    assert response.status_code == status, response.text
    assert inbox(tg_store) == [] and waker.drains == []


def test_an_oversized_body_without_a_length_is_cut_off(
    tg_settings: Settings, tg_store: Store
) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(MAX_BODY // 65536 + 2):
            yield b" " * 65536

    client, _ = client_for(tg_settings, tg_store)
    with client:
        response = client.post(URL, content=chunks(), headers=HEADERS)
    assert response.status_code == 413
    assert inbox(tg_store) == []


@pytest.mark.parametrize(
    "name", ["edited_message", "callback_query", "sticker_only", "migrate_to_chat_id"]
)
def test_updates_that_are_not_turns_are_acked_and_ignored(
    tg_settings: Settings, tg_store: Store, name: str
) -> None:
    client, _ = client_for(tg_settings, tg_store)
    with client:
        response = client.post(URL, json=update(name), headers=HEADERS)
    assert response.status_code == 200 and response.json() == {}
    assert inbox(tg_store) == []


def test_an_unknown_update_kind_is_acked_and_ignored(
    tg_settings: Settings, tg_store: Store
) -> None:
    client, _ = client_for(tg_settings, tg_store)
    with client:
        response = client.post(
            URL, json={"update_id": 5, "quantum_poll": {"id": "q"}}, headers=HEADERS
        )
    assert response.status_code == 200
    assert inbox(tg_store) == []


def test_a_store_failure_is_503_not_500(tg_settings: Settings, tg_store: Store) -> None:
    client, waker = client_for(tg_settings, tg_store)
    with tg_store.write() as conn:  # the database refuses every new turn
        conn.execute(
            text(
                "CREATE TRIGGER refuse BEFORE INSERT ON inbox"
                " BEGIN SELECT RAISE(ABORT, 'disk full'); END"
            )
        )
    with client:
        response = client.post(URL, json=update("private"), headers=HEADERS)
    assert response.status_code == 503
    assert inbox(tg_store) == [] and waker.drains == []


def test_other_methods_and_paths(tg_settings: Settings, tg_store: Store) -> None:
    client, _ = client_for(tg_settings, tg_store)
    with client:
        assert client.get(URL).status_code == 405
        assert client.post("/slack/events", content=b"{}").status_code == 404
        health = client.get("/healthz").json()
        assert (health["ok"], health["receivers"]) == (True, ["telegram"])
        assert health["stack"] == stack_id(tg_settings)


def test_without_a_secret_the_webhook_is_off(hermes_env: dict[str, str], store: Store) -> None:
    settings = load_settings({**hermes_env, "HERMES_PLATFORMS__TELEGRAM__TOKEN": TOKEN})
    client, _ = client_for(settings, store)
    with client:
        response = client.post(URL, json=update("private"), headers=HEADERS)
    assert response.status_code == 404
    assert inbox(store) == []


def test_a_user_not_on_the_allow_list_gets_one_refusal_and_nothing_is_stored(
    hermes_env: dict[str, str], store: Store
) -> None:
    settings = load_settings(
        {
            **hermes_env,
            "HERMES_PLATFORMS__TELEGRAM__TOKEN": TOKEN,
            "HERMES_PLATFORMS__TELEGRAM__WEBHOOK_SECRET": SECRET,
            "HERMES_PLATFORMS__TELEGRAM__ALLOWED_USERS": "999,222222222",
            "HERMES_PLATFORMS__TELEGRAM__USERNAME": "hermes_bot",
        }
    )
    client, _ = client_for(settings, store)
    stranger = update("private")
    with client:
        first = client.post(URL, json=stranger, headers=HEADERS)
        later = copy.deepcopy(stranger)
        later["update_id"] += 1
        second = client.post(URL, json=later, headers=HEADERS)
        allowed = client.post(URL, json=update("group"), headers=HEADERS)
    assert first.status_code == 200
    assert first.json() == {
        "method": "sendMessage",
        "chat_id": "111111111",
        "text": "Sorry, this assistant is private.",
    }
    assert second.status_code == 200 and second.json() == {}
    assert allowed.status_code == 200 and allowed.json() == {}
    assert [row[1] for row in inbox(store)] == ["agent:main:telegram:group:-4012345678:222222222"]
    with store.read() as conn:
        assert conn.execute(text("SELECT count(*) FROM routes")).scalar_one() == 1
        assert conn.execute(text("SELECT count(*) FROM sessions")).scalar_one() == 0


def test_a_migration_message_moves_the_chat(tg_settings: Settings, tg_store: Store) -> None:
    client, _ = client_for(tg_settings, tg_store)
    with client:
        assert client.post(URL, json=update("group"), headers=HEADERS).status_code == 200
        with tg_store.write() as conn:
            chats.set_home_channel(
                conn, chats.HomeChannel("telegram", "-4012345678", "group", None, "222222222")
            )
        moved = client.post(URL, json=update("migrate_to_chat_id"), headers=HEADERS)
        assert moved.status_code == 200
        follow = update("group")
        follow["update_id"] = 700000100
        follow["message"]["chat"] = {
            "id": -1001112223334,
            "title": "Book club",
            "type": "supergroup",
        }
        follow["message"]["text"] = "@hermes_bot after the upgrade"
        follow["message"]["entities"] = [{"offset": 0, "length": 11, "type": "mention"}]
        assert client.post(URL, json=follow, headers=HEADERS).status_code == 200
    with tg_store.read() as conn:
        routes = conn.execute(
            text("SELECT session_key, chat_id FROM routes ORDER BY session_key")
        ).all()
        home = chats.get_home_channel(conn, "telegram")
    assert [tuple(r) for r in routes] == [
        ("agent:main:telegram:group:-1001112223334:222222222", "-1001112223334"),
        ("agent:main:telegram:group:-4012345678:222222222", "-1001112223334"),
    ]
    assert home is not None and home.chat_id == "-1001112223334"
    assert json.loads(json.dumps(inbox(tg_store)))[-1][1].endswith("-1001112223334:222222222")
