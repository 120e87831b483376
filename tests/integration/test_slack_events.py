"""POST /slack/events on a real state.db: signatures (Slack's published example), the challenge,
retries and the double mention collapsing, slash commands, bad input, refusals."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from sqlalchemy import text
from starlette.testclient import TestClient

from producers.gateway.app import create_app
from producers.gateway.body import MAX_BODY
from producers.gateway.deps import Gateway
from producers.slack.signature import BadSignature, sign, verify
from shared.db import Store, open_store
from shared.ports import RecordingWaker
from shared.settings import Settings, load_settings
from tests.fakes.golden import load
from tests.fakes.slack_api import FakeSlack
from tests.fakes.stack import wait_for

# Slack's own walk-through ("Verifying requests from Slack", api.slack.com): these exact values.
EXAMPLE_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
EXAMPLE_TIMESTAMP = "1531420618"
EXAMPLE_BODY = (
    b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V"
    b"&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text="
    b"&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmi"
    b"bIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
)
EXAMPLE_SIGNATURE = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"

SECRET = "slack-signing-secret-for-tests"
TOKEN = "xoxb-1111-2222-bottoken"
URL = "/slack/events"


def test_slacks_published_example_verifies() -> None:
    assert sign(EXAMPLE_SECRET, EXAMPLE_TIMESTAMP, EXAMPLE_BODY) == EXAMPLE_SIGNATURE
    verify(EXAMPLE_SECRET, EXAMPLE_TIMESTAMP, EXAMPLE_SIGNATURE, EXAMPLE_BODY, now=1531420618 + 60)


@pytest.mark.parametrize(
    ("secret", "timestamp", "signature", "body", "now", "why"),
    [
        (
            EXAMPLE_SECRET,
            EXAMPLE_TIMESTAMP,
            EXAMPLE_SIGNATURE,
            EXAMPLE_BODY + b"x",
            1531420618,
            "match",
        ),
        ("another-secret", EXAMPLE_TIMESTAMP, EXAMPLE_SIGNATURE, EXAMPLE_BODY, 1531420618, "match"),
        (EXAMPLE_SECRET, "1531420619", EXAMPLE_SIGNATURE, EXAMPLE_BODY, 1531420618, "match"),
        (
            EXAMPLE_SECRET,
            EXAMPLE_TIMESTAMP,
            EXAMPLE_SIGNATURE,
            EXAMPLE_BODY,
            1531420618 + 301,
            "stale",
        ),
        (
            EXAMPLE_SECRET,
            EXAMPLE_TIMESTAMP,
            EXAMPLE_SIGNATURE,
            EXAMPLE_BODY,
            1531420618 - 301,
            "stale",
        ),
        (EXAMPLE_SECRET, None, EXAMPLE_SIGNATURE, EXAMPLE_BODY, 1531420618, "missing"),
        (EXAMPLE_SECRET, EXAMPLE_TIMESTAMP, None, EXAMPLE_BODY, 1531420618, "missing"),
        (EXAMPLE_SECRET, "soon", EXAMPLE_SIGNATURE, EXAMPLE_BODY, 1531420618, "number"),
        (EXAMPLE_SECRET, EXAMPLE_TIMESTAMP, "v0=" + "0" * 64, EXAMPLE_BODY, 1531420618, "match"),
        (
            EXAMPLE_SECRET,
            EXAMPLE_TIMESTAMP,
            EXAMPLE_SIGNATURE[3:],
            EXAMPLE_BODY,
            1531420618,
            "match",
        ),
    ],
)
def test_anything_else_is_refused(
    secret: str, timestamp: str | None, signature: str | None, body: bytes, now: float, why: str
) -> None:
    with pytest.raises(BadSignature, match=why):
        verify(secret, timestamp, signature, body, now=now)


@pytest.fixture
def slack_settings(hermes_env: dict[str, str]) -> Settings:
    return load_settings(
        {
            **hermes_env,
            "HERMES_PLATFORMS__SLACK__TOKEN": TOKEN,
            "HERMES_PLATFORMS__SLACK__SIGNING_SECRET": SECRET,
        }
    )


@pytest.fixture
def slack_store(slack_settings: Settings) -> Iterator[Store]:
    store = open_store(slack_settings.resolved_database_url)
    yield store
    store.close()


def signed(
    body: bytes, *, secret: str = SECRET, at: float | None = None, kind: str = "json"
) -> dict[str, str]:
    timestamp = str(int(time.time() if at is None else at))
    content = "application/json" if kind == "json" else "application/x-www-form-urlencoded"
    return {
        "X-Slack-Request-Timestamp": timestamp,
        "X-Slack-Signature": sign(secret, timestamp, body),
        "Content-Type": content,
    }


def client_for(settings: Settings, store: Store) -> TestClient:
    return TestClient(create_app(Gateway(settings, store, RecordingWaker(), time.time)))


def event(name: str) -> bytes:
    payload, _ = load("slack", name)
    return json.dumps(payload).encode()


def inbox(store: Store) -> list[tuple[str, str]]:
    with store.read() as conn:
        rows = conn.execute(text("SELECT event_id, text FROM inbox ORDER BY id"))
        return [(r[0], r[1]) for r in rows]


def test_url_verification_is_answered(slack_settings: Settings, slack_store: Store) -> None:
    body = json.dumps(
        {
            "token": "Jhj5dZrVaK7ZwHHjRyZWjbDl",
            "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
            "type": "url_verification",
        }
    ).encode()
    with client_for(slack_settings, slack_store) as client:
        response = client.post(URL, content=body, headers=signed(body))
    assert response.status_code == 200
    assert response.json() == {"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}


def test_an_event_is_recorded_and_retries_and_the_double_mention_are_one_turn(
    slack_settings: Settings, slack_store: Store
) -> None:
    mention, message = event("channel_app_mention"), event("channel_message_mention")
    with client_for(slack_settings, slack_store) as client:
        assert client.post(URL, content=mention, headers=signed(mention)).status_code == 200
        retry = {
            **signed(mention),
            "X-Slack-Retry-Num": "1",
            "X-Slack-Retry-Reason": "http_timeout",
        }
        assert client.post(URL, content=mention, headers=retry).status_code == 200
        assert client.post(URL, content=message, headers=signed(message)).status_code == 200
        dm = event("dm")
        assert client.post(URL, content=dm, headers=signed(dm)).status_code == 200
    assert inbox(slack_store) == [
        ("T0001ABCD:C0GENERAL:1767225700.000200", "summarise this channel"),
        ("T0001ABCD:D0DMANN01:1767225600.000100", "what's on my calendar & why?"),
    ]


@pytest.mark.parametrize(
    "name",
    [
        "bot_message",
        "own_reply",
        "message_changed",
        "message_deleted",
        "channel_chatter",
        "reaction_added",
    ],
)
def test_events_that_are_not_turns_are_acked_and_ignored(
    slack_settings: Settings, slack_store: Store, name: str
) -> None:
    body = event(name)
    with client_for(slack_settings, slack_store) as client:
        response = client.post(URL, content=body, headers=signed(body))
    assert response.status_code == 200
    assert inbox(slack_store) == []


def _bad_cases() -> dict[str, tuple[bytes, dict[str, str], int]]:
    """Built when the test runs: signatures carry the current time."""
    good = event("dm")
    not_event = b'{"type": "event_callback", "event": 3}'
    no_challenge = b'{"type": "url_verification"}'
    huge = b"x" * (MAX_BODY + 1)
    return {
        "no signature": (good, {"Content-Type": "application/json"}, 401),
        "wrong secret": (good, signed(good, secret="not-the-secret"), 401),
        "stale timestamp": (good, signed(good, at=time.time() - 301), 401),
        "future timestamp": (good, signed(good, at=time.time() + 400), 401),
        "body changed": (good + b" ", signed(good), 401),
        "malformed json": (b"{oops", signed(b"{oops"), 400),
        "json not an object": (b"[]", signed(b"[]"), 400),
        "event not an object": (not_event, signed(not_event), 400),
        "challenge missing": (no_challenge, signed(no_challenge), 400),
        "bad command form": (b"command=%2Fnew", signed(b"command=%2Fnew", kind="form"), 400),
        "over the cap": (huge, signed(huge), 413),
    }


BAD_CASES = [
    "no signature",
    "wrong secret",
    "stale timestamp",
    "future timestamp",
    "body changed",
    "malformed json",
    "json not an object",
    "event not an object",
    "challenge missing",
    "bad command form",
    "over the cap",
]


@pytest.mark.parametrize("why", BAD_CASES)
def test_bad_input_is_4xx_and_records_nothing(
    slack_settings: Settings, slack_store: Store, why: str
) -> None:
    body, headers, status = _bad_cases()[why]
    with client_for(slack_settings, slack_store) as client:
        response = client.post(URL, content=body, headers=headers)
    assert response.status_code == status, (why, response.text)
    assert inbox(slack_store) == []


def test_a_slash_command_is_a_turn(slack_settings: Settings, slack_store: Store) -> None:
    body = urlencode(
        {
            "command": "/new",
            "text": "my project",
            "team_id": "T0001ABCD",
            "channel_id": "D0DMANN01",
            "user_id": "U0ANN0001",
            "user_name": "ann",
            "trigger_id": "1.2.3",
        }
    ).encode()
    with client_for(slack_settings, slack_store) as client:
        response = client.post(URL, content=body, headers=signed(body, kind="form"))
    assert response.status_code == 200
    assert inbox(slack_store) == [("T0001ABCD:cmd:1.2.3", "/new my project")]


def test_a_refused_user_gets_one_ephemeral_refusal(
    hermes_env: dict[str, str], store: Store
) -> None:
    with FakeSlack(TOKEN) as fake:
        settings = load_settings(
            {
                **hermes_env,
                "HERMES_PLATFORMS__SLACK__TOKEN": TOKEN,
                "HERMES_PLATFORMS__SLACK__SIGNING_SECRET": SECRET,
                "HERMES_PLATFORMS__SLACK__API_BASE": fake.api_base,
                "HERMES_PLATFORMS__SLACK__ALLOWED_USERS": "U0SOMEONE",
            }
        )
        mention, dm, thread = event("channel_app_mention"), event("dm"), event("thread")
        with client_for(settings, store) as client:
            for body in (mention, dm, mention, dm, thread):  # bob, ann, bob, ann, ann
                assert client.post(URL, content=body, headers=signed(body)).status_code == 200
        wait_for(lambda: len(fake.calls) >= 2, timeout=10)
        time.sleep(0.2)
        sent: list[dict[str, Any]] = [{"method": c.method, **c.params} for c in fake.calls]
    assert inbox(store) == []
    assert sent == [
        {
            "method": "chat.postEphemeral",
            "channel": "C0GENERAL",
            "user": "U0BOB0001",
            "text": "Sorry, this assistant is private.",
        },
        {
            "method": "chat.postMessage",
            "channel": "D0DMANN01",
            "text": "Sorry, this assistant is private.",
        },
    ]
