"""GET|POST /whatsapp/webhook on a real state.db: the handshake, signatures, bad input,
status callbacks, redeliveries, allow-lists (the refusal sent to a fake Graph API)."""

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
from producers.whatsapp.receiver import sign
from shared.db import Store, open_store
from shared.ports import RecordingWaker
from shared.settings import Settings, load_settings
from tests.fakes.golden import load
from tests.fakes.graph_api import FakeGraph

TOKEN = "EAAGwhatsappTokenForTests0123"
APP_SECRET = "whatsapp-app-secret-for-tests"
VERIFY = "verify-me-please-42"
PHONE = "106540352242922"
URL = "/whatsapp/webhook"
USER = "16505551234"
ENTRY_NOT_A_LIST = b'{"object": "whatsapp_business_account", "entry": 5}'
CHANGE_NOT_AN_OBJECT = b'{"object": "whatsapp_business_account", "entry": [{"changes": [1]}]}'


def wa_settings(hermes_env: dict[str, str], **extra: str) -> Settings:
    return load_settings(
        {
            **hermes_env,
            "HERMES_PLATFORMS__WHATSAPP__TOKEN": TOKEN,
            "HERMES_PLATFORMS__WHATSAPP__APP_SECRET": APP_SECRET,
            "HERMES_PLATFORMS__WHATSAPP__VERIFY_TOKEN": VERIFY,
            "HERMES_PLATFORMS__WHATSAPP__PHONE_NUMBER_ID": PHONE,
            **extra,
        }
    )


@pytest.fixture
def wa(hermes_env: dict[str, str]) -> Settings:
    return wa_settings(hermes_env)


@pytest.fixture
def wa_store(wa: Settings) -> Iterator[Store]:
    store = open_store(wa.resolved_database_url)
    yield store
    store.close()


def client_for(settings: Settings, store: Store) -> tuple[TestClient, RecordingWaker]:
    waker = RecordingWaker()
    return TestClient(create_app(Gateway(settings, store, waker, time.time))), waker


def stored(store: Store) -> dict[str, int]:
    with store.read() as conn:
        return {
            table: int(conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())
            for table in ("inbox", "routes", "sessions", "messages", "outbox")
        }


def inbox(store: Store) -> list[tuple[str, str, str]]:
    with store.read() as conn:
        rows = conn.execute(text("SELECT event_id, session_key, text FROM inbox ORDER BY id"))
        return [tuple(r) for r in rows]  # type: ignore[misc]


def payload(name: str) -> dict[str, Any]:
    found, _ = load("whatsapp", name)
    return copy.deepcopy(dict(found))


def signed(body: bytes, secret: str = APP_SECRET) -> dict[str, str]:
    return {"Content-Type": "application/json", "X-Hub-Signature-256": sign(secret, body)}


def post(client: TestClient, data: dict[str, Any]) -> Any:
    body = json.dumps(data).encode()
    return client.post(URL, content=body, headers=signed(body))


def test_the_handshake_echoes_the_challenge_only_for_the_verify_token(
    wa: Settings, wa_store: Store
) -> None:
    client, _ = client_for(wa, wa_store)
    good = {"hub.mode": "subscribe", "hub.verify_token": VERIFY, "hub.challenge": "1158201444"}
    with client:
        answer = client.get(URL, params=good)
        assert (answer.status_code, answer.text) == (200, "1158201444")
        for bad in (
            {**good, "hub.verify_token": "wrong"},
            {**good, "hub.verify_token": VERIFY + "x"},
            {**good, "hub.mode": "unsubscribe"},
            {"hub.mode": "subscribe", "hub.challenge": "1"},
            {},
        ):
            refused = client.get(URL, params=bad)
            assert refused.status_code == 403 and "1158201444" not in refused.text, bad
        assert client.get(URL, params={**good, "hub.challenge": ""}).status_code == 400
    assert stored(wa_store)["inbox"] == 0


def test_without_a_verify_token_the_handshake_is_refused(
    hermes_env: dict[str, str], store: Store
) -> None:
    settings = wa_settings(hermes_env, HERMES_PLATFORMS__WHATSAPP__VERIFY_TOKEN="")
    client, _ = client_for(settings, store)
    with client:
        params = {"hub.mode": "subscribe", "hub.verify_token": "", "hub.challenge": "1"}
        assert client.get(URL, params=params).status_code == 403


def test_a_message_is_recorded_then_acked_and_a_redelivery_is_a_no_op(
    wa: Settings, wa_store: Store
) -> None:
    client, waker = client_for(wa, wa_store)
    with client:
        first = post(client, payload("text"))
        again = post(client, payload("repeated_text"))
    assert first.status_code == again.status_code == 200
    assert inbox(wa_store) == [
        (
            "wamid.HBgLMTY1MDUxNzY0MzkVAgASGBQzQTRBNjU5OUFFRTAzODEwMTQ0RgA=",
            f"agent:main:whatsapp:dm:{USER}",
            "Does it come in another color?",
        )
    ]
    assert waker.drains[0] == (f"agent:main:whatsapp:dm:{USER}", None)


def test_a_batch_records_each_message_in_order(wa: Settings, wa_store: Store) -> None:
    client, _ = client_for(wa, wa_store)
    with client:
        assert post(client, payload("two_messages")).status_code == 200
    assert [row[2] for row in inbox(wa_store)] == ["first", "second"]


@pytest.mark.parametrize(
    "name",
    [
        "status_delivered",
        "status_failed_window",
        "reaction",
        "unsupported",
        "sticker",
        "other_number",
    ],
)
def test_status_callbacks_and_non_turns_are_acked_and_store_nothing(
    wa: Settings, wa_store: Store, name: str
) -> None:
    client, waker = client_for(wa, wa_store)
    with client:
        response = post(client, payload(name))
    assert response.status_code == 200
    assert stored(wa_store) == dict.fromkeys(stored(wa_store), 0)
    assert waker.drains == []


def _body(name: str = "text") -> bytes:
    return json.dumps(payload(name)).encode()


@pytest.mark.parametrize(
    ("headers", "body", "status"),
    [
        ({"Content-Type": "application/json"}, _body(), 401),  # unsigned
        ({**signed(_body()), "X-Hub-Signature-256": ""}, _body(), 401),
        (signed(_body(), "another-secret"), _body(), 403),  # forged
        (signed(_body("image")), _body(), 403),  # a signature of another body
        ({**signed(_body()), "X-Hub-Signature-256": "sha1=" + "0" * 40}, _body(), 403),
        ({**signed(_body()), "X-Hub-Signature-256": "sha256=xyz"}, _body(), 403),
        ({**signed(b"{}"), "Content-Type": "text/plain"}, b"{}", 415),
        (signed(b"{not json"), b"{not json", 400),
        (signed(b"\xff\xfe"), b"\xff\xfe", 400),
        (signed(b"[1, 2]"), b"[1, 2]", 400),
        (signed(b"{}"), b"{}", 400),
        (signed(ENTRY_NOT_A_LIST), ENTRY_NOT_A_LIST, 400),
        (signed(CHANGE_NOT_AN_OBJECT), CHANGE_NOT_AN_OBJECT, 400),
        (signed(b"x" * (MAX_BODY + 1)), b"x" * (MAX_BODY + 1), 413),
    ],
)
def test_forged_unsigned_and_malformed_posts_are_4xx_and_store_nothing(
    wa: Settings, wa_store: Store, headers: dict[str, str], body: bytes, status: int
) -> None:
    client, waker = client_for(wa, wa_store)
    with client:
        response = client.post(URL, content=body, headers=headers)
    assert response.status_code == status, response.text
    assert stored(wa_store) == dict.fromkeys(stored(wa_store), 0)
    assert waker.drains == []


def test_a_store_failure_is_503_not_500(wa: Settings, wa_store: Store) -> None:
    client, waker = client_for(wa, wa_store)
    with wa_store.write() as conn:
        conn.execute(
            text(
                "CREATE TRIGGER refuse BEFORE INSERT ON inbox"
                " BEGIN SELECT RAISE(ABORT, 'disk full'); END"
            )
        )
    with client:
        response = post(client, payload("text"))
    assert response.status_code == 503
    assert inbox(wa_store) == [] and waker.drains == []


def test_without_an_app_secret_there_is_no_route(hermes_env: dict[str, str], store: Store) -> None:
    settings = wa_settings(hermes_env, HERMES_PLATFORMS__WHATSAPP__APP_SECRET="")
    client, _ = client_for(settings, store)
    with client:
        assert post(client, payload("text")).status_code == 404
        assert client.get("/healthz").json()["receivers"] == []
    assert inbox(store) == []


def test_a_user_not_on_the_allow_list_gets_one_refusal_and_nothing_is_stored(
    hermes_env: dict[str, str], store: Store
) -> None:
    with FakeGraph(TOKEN, PHONE) as graph:
        settings = wa_settings(
            hermes_env,
            HERMES_PLATFORMS__WHATSAPP__ALLOWED_USERS="447700900123",
            HERMES_PLATFORMS__WHATSAPP__API_BASE=graph.api_base,
        )
        client, waker = client_for(settings, store)
        with client:
            first = post(client, payload("text"))
            later = payload("text_reply")  # the same stranger again, within the hour
            second = post(client, later)
            allowed = post(client, payload("two_messages"))  # the second is from Ann
        refusals = graph.sent(USER)
    assert first.status_code == second.status_code == allowed.status_code == 200
    assert [r["text"]["body"] for r in refusals] == ["Sorry, this assistant is private."]
    assert refusals[0]["context"] == {
        "message_id": "wamid.HBgLMTY1MDUxNzY0MzkVAgASGBQzQTRBNjU5OUFFRTAzODEwMTQ0RgA="
    }
    assert [row[2] for row in inbox(store)] == ["second"]
    assert stored(store)["sessions"] == 0 and len(waker.drains) == 1
