"""A chat migration over the webhook (real HTTP into `hermes gateway telegram`): a malformed one
is refused with 400 and changes nothing; a well-formed one re-keys the chat's routes."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from shared.db import Store, open_store
from shared.settings import load_settings
from shared.store import chats
from tests.fakes.golden import load
from tests.fakes.server import free_port
from tests.fakes.stack import Proc, redis_db_url, start_gateway

TOKEN = "123456789:AAFakeTokenForTestsMigration"
SECRET = "migration-webhook-secret"
HEADERS = {"X-Telegram-Bot-Api-Secret-Token": SECRET}


@pytest.fixture
def served(
    hermes_env: dict[str, str], hermes_home: Path, redis_url: str
) -> Iterator[tuple[str, Store, Proc]]:
    port = free_port()
    env = {
        **hermes_env,
        "HERMES_BROKER_URL": redis_db_url(redis_url),
        "HERMES_GATEWAY__PORT": str(port),
        "HERMES_PLATFORMS__TELEGRAM__TOKEN": TOKEN,
        "HERMES_PLATFORMS__TELEGRAM__WEBHOOK_SECRET": SECRET,
        "HERMES_PLATFORMS__TELEGRAM__API_BASE": "http://127.0.0.1:9/bot",  # never called
        "HERMES_PLATFORMS__TELEGRAM__USERNAME": "hermes_bot",
    }
    proc = start_gateway(env, hermes_home, "telegram", port)
    store = open_store(load_settings(env).resolved_database_url)
    try:
        yield f"http://127.0.0.1:{port}/telegram/webhook", store, proc
    finally:
        code = proc.stop()
        store.close()
        assert code == 0, proc.output()


def _update(name: str, number: int, **message: Any) -> dict[str, Any]:
    payload, _ = load("telegram", name)
    data = copy.deepcopy(dict(payload))
    data["update_id"] = number
    data["message"].update(message)
    return data


def _state(store: Store) -> tuple[list[tuple[str, str]], str | None]:
    with store.read() as conn:
        found = conn.execute(text("SELECT session_key, chat_id FROM routes ORDER BY 1")).all()
        home = chats.get_home_channel(conn, "telegram")
    return [(str(r[0]), str(r[1])) for r in found], home.chat_id if home else None


@pytest.mark.timeout(120)
def test_a_malformed_migration_changes_nothing_and_a_good_one_moves_the_chat(
    served: tuple[str, Store, Proc],
) -> None:
    url, store, _ = served
    assert httpx.post(url, json=_update("group", 800), headers=HEADERS).status_code == 200
    with store.write() as conn:
        chats.set_home_channel(
            conn, chats.HomeChannel("telegram", "-4012345678", "group", None, "222222222")
        )
    before = _state(store)
    assert before[0] and before[1] == "-4012345678"
    bad: list[dict[str, Any]] = [
        _update("migrate_to_chat_id", 801, migrate_to_chat_id={"id": -1001112223334}),
        _update("migrate_to_chat_id", 802, migrate_to_chat_id="not-a-number"),
        _update("migrate_to_chat_id", 803, migrate_to_chat_id="-1001112223334"),
        _update("migrate_to_chat_id", 804, migrate_to_chat_id=True),
        _update("migrate_to_chat_id", 805, migrate_to_chat_id=[1]),
        _update("migrate_to_chat_id", 806, chat={"id": "evil", "type": "group"}),
        _update("migrate_to_chat_id", 807, chat={"id": {"x": 1}, "type": "group"}),
        _update(
            "group",
            808,
            chat={"id": -1001112223334, "type": "supergroup"},
            migrate_from_chat_id="-4012345678 OR 1",
        ),
    ]
    for update in bad:
        response = httpx.post(url, json=update, headers=HEADERS)
        assert response.status_code == 400, (update, response.text)
        assert _state(store) == before, update
    good = httpx.post(url, json=_update("migrate_to_chat_id", 809), headers=HEADERS)
    assert good.status_code == 200
    routes, home = _state(store)
    assert home == "-1001112223334"
    assert {chat for _, chat in routes} == {"-1001112223334"}
