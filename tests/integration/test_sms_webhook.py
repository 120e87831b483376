"""POST /sms/twilio on the real gateway app and a real state.db: Twilio's signature (checked by
twilio's RequestValidator, signed here the same way), bad input, carrier keywords, refusals."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest
from sqlalchemy import text
from starlette.testclient import TestClient

from producers.gateway.app import create_app
from producers.gateway.deps import Gateway
from producers.sms.receiver import Fields
from shared.db import Store, open_store
from shared.ports import RecordingWaker
from shared.settings import Settings, load_settings
from tests.fakes.golden import load
from tests.fakes.twilio_api import ACCOUNT, NUMBER, TOKEN, FakeTwilio

PATH = "/sms/twilio"
URL = f"http://testserver{PATH}"  # where the TestClient's requests arrive
PUBLIC = "https://hermes.example.com/hooks/sms"  # what Twilio's console would hold
EMPTY = '<?xml version="1.0" encoding="UTF-8"?><Response />'
FORM = "application/x-www-form-urlencoded"
SIGNER = FakeTwilio()


def sms_env(hermes_env: dict[str, str], **more: str) -> dict[str, str]:
    return {
        **hermes_env,
        "HERMES_PLATFORMS__SMS__TOKEN": TOKEN,
        "HERMES_PLATFORMS__SMS__ACCOUNT_SID": ACCOUNT,
        "HERMES_PLATFORMS__SMS__FROM_NUMBER": NUMBER,
        **{f"HERMES_PLATFORMS__SMS__{k.upper()}": v for k, v in more.items()},
    }


@pytest.fixture
def sms_settings(hermes_env: dict[str, str]) -> Settings:
    return load_settings(sms_env(hermes_env))


@pytest.fixture
def sms_store(sms_settings: Settings) -> Iterator[Store]:
    store = open_store(sms_settings.resolved_database_url)
    yield store
    store.close()


def client_for(settings: Settings, store: Store) -> tuple[TestClient, RecordingWaker]:
    waker = RecordingWaker()
    return TestClient(create_app(Gateway(settings, store, waker, time.time))), waker


def inbox(store: Store) -> list[tuple[str, str, str]]:
    with store.read() as conn:
        rows = conn.execute(text("SELECT event_id, session_key, text FROM inbox ORDER BY id"))
        return [tuple(r) for r in rows]


def stored_anything(store: Store) -> bool:
    with store.read() as conn:
        return any(
            conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()
            for table in ("inbox", "routes", "sessions")
        )


def form(name: str, **changes: Any) -> dict[str, str]:
    payload, _ = load("sms", name)
    return {**payload, **changes}


def sign_raw(body: bytes) -> str:
    """The signature Twilio would send for this raw body (every value of a repeated field)."""
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True)
    except UnicodeDecodeError:
        return "unsignable"
    fields = Fields()
    for name, value in pairs:
        fields.setdefault(name, []).append(value)
    from twilio.request_validator import RequestValidator

    return str(RequestValidator(TOKEN).compute_signature(URL, fields))


def post(client: TestClient, fields: dict[str, str], *, url: str = URL, token: str = TOKEN) -> Any:
    headers = {"X-Twilio-Signature": SIGNER.sign(url, fields, token), "Content-Type": FORM}
    return client.post(PATH, content=urlencode(fields), headers=headers)


def test_a_message_is_recorded_answered_with_empty_twiml_and_a_redelivery_is_a_no_op(
    sms_settings: Settings, sms_store: Store
) -> None:
    client, waker = client_for(sms_settings, sms_store)
    with client:
        first = post(client, form("dm"))
        again = post(client, form("redelivered"))
        health = client.get("/healthz").json()
    assert first.status_code == again.status_code == 200
    assert first.headers["content-type"].startswith("text/xml")
    assert first.text == again.text == EMPTY
    key = "agent:main:sms:dm:+14155550123"
    assert inbox(sms_store) == [("SM" + "1" * 32, key, "Hello there, what's on today?")]
    assert waker.drains[0] == (key, None)
    assert health["receivers"] == ["sms"]


def test_a_forged_or_unsigned_request_is_403_and_stores_nothing(
    sms_settings: Settings, sms_store: Store
) -> None:
    fields = form("dm")
    body = urlencode(fields)
    signed = SIGNER.sign(URL, fields)
    tampered = {**fields, "Body": "transfer everything"}
    client, waker = client_for(sms_settings, sms_store)
    with client:
        unsigned = client.post(PATH, content=body, headers={"Content-Type": FORM})
        empty = client.post(
            PATH, content=body, headers={"Content-Type": FORM, "X-Twilio-Signature": ""}
        )
        wrong_token = post(client, fields, token="not-the-auth-token")
        other_body = client.post(
            PATH,
            content=urlencode(tampered),
            headers={"Content-Type": FORM, "X-Twilio-Signature": signed},
        )
        other_url = post(client, fields, url="http://testserver/sms/other")
    for response in (unsigned, empty, wrong_token, other_body, other_url):
        assert response.status_code == 403, response.text
    assert "X-Twilio-Signature" in unsigned.json()["error"]
    assert not stored_anything(sms_store) and waker.drains == []


@pytest.mark.parametrize(
    ("body", "content_type", "status"),
    [
        (b"\xff\xfe=1", FORM, 400),  # not UTF-8
        (b"Body=%FF%FE", FORM, 400),  # percent-escapes that are not UTF-8
        (b"just some words", FORM, 400),  # not name=value pairs
        (b"", FORM, 400),  # no MessageSid
        (None, FORM, 400),  # a field given twice (see below)
        (b"MessageSid=SM1&From=%2B14155550123&Body=hi", FORM, 400),  # not a message SID
        (b'{"MessageSid": "x"}', "application/json", 415),
        (b"x" * (64 * 1024 + 1), FORM, 413),
    ],
)
def test_malformed_bodies_are_4xx_never_5xx_and_store_nothing(
    sms_settings: Settings, sms_store: Store, body: bytes | None, content_type: str, status: int
) -> None:
    if body is None:
        body = (urlencode(form("dm")) + "&Body=second").encode()
    signature = sign_raw(body)  # signed as Twilio would, where the body has fields at all
    client, waker = client_for(sms_settings, sms_store)
    with client:
        response = client.post(
            PATH,
            content=body,
            headers={"Content-Type": content_type, "X-Twilio-Signature": signature},
        )
    assert response.status_code == status, response.text
    assert not stored_anything(sms_store) and waker.drains == []


@pytest.mark.parametrize(
    "changes",
    [
        {"MessageSid": "SM123", "SmsMessageSid": "SM123"},
        {"From": "not a number"},
        {"NumMedia": "2"},  # no MediaUrl0
        {"NumMedia": "lots"},
        {"NumMedia": "1", "MediaUrl0": "javascript:alert(1)"},
    ],
)
def test_signed_but_malformed_fields_are_400_and_store_nothing(
    sms_settings: Settings, sms_store: Store, changes: dict[str, str]
) -> None:
    client, waker = client_for(sms_settings, sms_store)
    with client:
        response = post(client, form("dm", **changes))
    assert response.status_code == 400, response.text
    assert not stored_anything(sms_store) and waker.drains == []


@pytest.mark.parametrize("name", ["stop", "help_any_case", "start", "advanced_opt_out", "empty"])
def test_carrier_keywords_are_never_a_turn_and_never_answered(
    sms_settings: Settings, sms_store: Store, name: str
) -> None:
    client, waker = client_for(sms_settings, sms_store)
    with client:
        response = post(client, form(name))
    assert response.status_code == 200 and response.text == EMPTY
    assert not stored_anything(sms_store) and waker.drains == []


def test_a_number_not_on_the_allow_list_gets_one_refusal_and_nothing_is_stored(
    hermes_env: dict[str, str], store: Store
) -> None:
    settings = load_settings(sms_env(hermes_env, allowed_users="+14155550999"))
    client, _ = client_for(settings, store)
    with client:
        first = post(client, form("dm"))
        second = post(client, form("dm", MessageSid="SM" + "c" * 32))
        allowed = post(client, form("dm", From="+14155550999", MessageSid="SM" + "d" * 32))
    assert first.status_code == 200
    assert first.text == (
        '<?xml version="1.0" encoding="UTF-8"?>'
        "<Response><Message>Sorry, this assistant is private.</Message></Response>"
    )
    assert second.status_code == 200 and second.text == EMPTY  # once an hour, not every time
    assert allowed.status_code == 200 and allowed.text == EMPTY
    assert [row[1] for row in inbox(store)] == ["agent:main:sms:dm:+14155550999"]


def test_behind_a_proxy_the_configured_public_url_is_what_is_checked(
    hermes_env: dict[str, str], store: Store
) -> None:
    settings = load_settings(sms_env(hermes_env, webhook_url=PUBLIC))
    client, _ = client_for(settings, store)
    with client:
        as_seen_here = post(client, form("dm"), url=URL)
        as_twilio_signed = post(client, form("dm"), url=PUBLIC)
    assert as_seen_here.status_code == 403
    assert as_twilio_signed.status_code == 200
    assert [row[0] for row in inbox(store)] == ["SM" + "1" * 32]


def test_a_store_failure_is_503_not_500(sms_settings: Settings, sms_store: Store) -> None:
    client, waker = client_for(sms_settings, sms_store)
    with sms_store.write() as conn:  # the database refuses every new turn
        conn.execute(
            text(
                "CREATE TRIGGER refuse BEFORE INSERT ON inbox"
                " BEGIN SELECT RAISE(ABORT, 'disk full'); END"
            )
        )
    with client:
        response = post(client, form("dm"))
    assert response.status_code == 503
    assert inbox(sms_store) == [] and waker.drains == []


@pytest.mark.both_databases
def test_a_nul_in_a_signed_body_is_stored_as_a_replacement_character(
    sms_settings: Settings, sms_store: Store
) -> None:
    client, _ = client_for(sms_settings, sms_store)
    with client:
        response = post(client, form("dm", Body="before\x00after"))
    assert response.status_code == 200, response.text
    assert [row[2] for row in inbox(sms_store)] == ["before\ufffdafter"]
