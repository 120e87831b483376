"""Fuzzing POST /whatsapp/webhook from the golden fixtures: every field mutated in type and
value, each body correctly signed (so the translation, not the signature check, meets it).
Property: never a 5xx, never an error logged, no more rows than messages, and nothing stored
that the databases could not hold. `pytest --fuzz-long` runs 20× the examples."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text
from starlette.testclient import TestClient

from producers.gateway.app import create_app
from producers.gateway.deps import Gateway
from producers.whatsapp.receiver import sign
from shared.db import Store, open_store
from shared.ports import RecordingWaker
from shared.settings import Settings, load_settings
from shared.surrogates import LONE_SURROGATE
from tests.fakes.golden import FIXTURES
from tests.fuzzing import examples, mutated

SECRET = "whatsapp-fuzz-app-secret"
ACCEPTABLE = {200, 400, 413, 415}
FUZZ = settings(
    max_examples=examples(150),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
GOLDEN = [
    json.loads(path.read_text(encoding="utf-8"))
    for path in sorted((FIXTURES / "whatsapp").glob("*.json"))
    if not path.name.endswith(".expected.json")
]
PAYLOADS = st.sampled_from(GOLDEN).flatmap(mutated)


@pytest.fixture
def wa_settings(hermes_env: dict[str, str]) -> Settings:
    return load_settings(
        {
            **hermes_env,
            "HERMES_PLATFORMS__WHATSAPP__TOKEN": "EAAGfuzz",
            "HERMES_PLATFORMS__WHATSAPP__APP_SECRET": SECRET,
            "HERMES_PLATFORMS__WHATSAPP__PHONE_NUMBER_ID": "106540352242922",
        }
    )


@pytest.fixture
def wa_store(wa_settings: Settings) -> Iterator[Store]:
    store = open_store(wa_settings.resolved_database_url)
    yield store
    store.close()


@pytest.fixture
def wa_client(wa_settings: Settings, wa_store: Store) -> Iterator[TestClient]:
    gateway = Gateway(wa_settings, wa_store, RecordingWaker(), time.time)
    with TestClient(create_app(gateway)) as client:
        yield client


def _texts(store: Store) -> list[str]:
    with store.read() as conn:
        return [str(r[0]) for r in conn.execute(text("SELECT text FROM inbox ORDER BY id"))]


@FUZZ
@given(payload=PAYLOADS)
def test_the_whatsapp_webhook_holds_under_mutated_payloads(
    wa_client: TestClient, wa_store: Store, caplog: pytest.LogCaptureFixture, payload: Any
) -> None:
    body = json.dumps(payload).encode()
    headers = {"Content-Type": "application/json", "X-Hub-Signature-256": sign(SECRET, body)}
    before = len(_texts(wa_store))
    caplog.clear()
    with caplog.at_level(logging.ERROR):
        answer = wa_client.post("/whatsapp/webhook", content=body, headers=headers)
    assert answer.status_code in ACCEPTABLE, (answer.status_code, answer.text)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    rows = _texts(wa_store)
    assert len(rows) - before <= 2  # the largest golden payload carries two messages
    assert not any(LONE_SURROGATE.search(row) for row in rows[before:])
