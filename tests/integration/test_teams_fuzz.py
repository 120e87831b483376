"""Fuzzing POST /teams/messages from the golden activities: every field mutated in type and
value, each request carrying a valid Bot Framework token for its (possibly mutated) service
URL, so the translation, not the token check, meets it. Property: never a 5xx, never an error
logged, at most one row per activity, and nothing stored that the databases could not hold.
`pytest --fuzz-long` runs 20× the examples."""

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
from shared.db import Store, open_store
from shared.ports import RecordingWaker
from shared.settings import Settings, load_settings
from shared.surrogates import LONE_SURROGATE
from tests.fakes.bot_connector import FakeBotConnector
from tests.fakes.golden import FIXTURES
from tests.fuzzing import examples, mutated

APP_ID = "3f1c6c1e-7c2a-4f0b-9d47-2b5f0a6c8e11"
ACCEPTABLE = {200, 400, 403, 413, 415}
FUZZ = settings(
    max_examples=examples(150),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
GOLDEN = [
    json.loads(path.read_text(encoding="utf-8"))
    for path in sorted((FIXTURES / "teams").glob("*.json"))
    if not path.name.endswith(".expected.json")
]


@pytest.fixture(scope="module")
def bot() -> Iterator[FakeBotConnector]:
    with FakeBotConnector(APP_ID, "teams-fuzz-password") as fake:
        yield fake


def _addressed(bot: FakeBotConnector) -> list[dict[str, Any]]:
    return [{**g, "serviceUrl": bot.service_url} for g in GOLDEN]


@pytest.fixture
def teams_settings(hermes_env: dict[str, str], bot: FakeBotConnector) -> Settings:
    return load_settings({**hermes_env, **bot.settings()})


@pytest.fixture
def teams_store(teams_settings: Settings) -> Iterator[Store]:
    store = open_store(teams_settings.resolved_database_url)
    yield store
    store.close()


@pytest.fixture
def teams_client(teams_settings: Settings, teams_store: Store) -> Iterator[TestClient]:
    gateway = Gateway(teams_settings, teams_store, RecordingWaker(), time.time)
    with TestClient(create_app(gateway)) as client:
        yield client


def _texts(store: Store) -> list[str]:
    with store.read() as conn:
        return [str(r[0]) for r in conn.execute(text("SELECT text FROM inbox ORDER BY id"))]


@FUZZ
@given(data=st.data())
def test_the_teams_endpoint_holds_under_mutated_activities(
    teams_client: TestClient,
    teams_store: Store,
    bot: FakeBotConnector,
    caplog: pytest.LogCaptureFixture,
    data: st.DataObject,
) -> None:
    payload = data.draw(st.sampled_from(_addressed(bot)).flatmap(mutated))
    url = payload.get("serviceUrl") if isinstance(payload, dict) else None
    token = bot.token(serviceurl=url) if isinstance(url, str) else bot.token()
    body = json.dumps(payload).encode()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    before = len(_texts(teams_store))
    caplog.clear()
    with caplog.at_level(logging.ERROR):
        answer = teams_client.post("/teams/messages", content=body, headers=headers)
    assert answer.status_code in ACCEPTABLE, (answer.status_code, answer.text)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    rows = _texts(teams_store)
    assert len(rows) - before <= 1
    assert not any(LONE_SURROGATE.search(row) for row in rows[before:])
