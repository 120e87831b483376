"""Fuzzing the webhook endpoints from the golden fixtures (issue 21): every field mutated in
type and value. Property: never a 5xx, never an exception logged, at most one row stored per
request, and nothing stored that the databases could not hold.

`pytest --fuzz-long` runs 20× the examples.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from producers.slack.signature import sign
from shared.db import Store, open_store
from shared.settings import Settings
from shared.surrogates import LONE_SURROGATE
from tests.fakes.golden import FIXTURES
from tests.fuzzing import examples, mutated
from tests.integration.webhook_kit import (
    SLACK_SECRET,
    TG_SECRET,
    inbox_texts,
    served,
    webhook_settings,
)

ACCEPTABLE = {200, 400, 401, 404, 408, 413, 415}
FUZZ = settings(
    max_examples=examples(150),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def golden(platform: str) -> list[Any]:
    return [
        json.loads(path.read_text(encoding="utf-8"))
        for path in sorted((FIXTURES / platform).glob("*.json"))
        if not path.name.endswith(".expected.json")
    ]


@pytest.fixture
def fuzz_settings(hermes_env: dict[str, str]) -> Settings:
    return webhook_settings(hermes_env)


@pytest.fixture
def fuzz_store(fuzz_settings: Settings) -> Iterator[Store]:
    store = open_store(fuzz_settings.resolved_database_url)
    yield store
    store.close()


@pytest.fixture
def fuzz_client(fuzz_settings: Settings, fuzz_store: Store) -> Iterator[TestClient]:
    with served(fuzz_settings, fuzz_store) as client:
        yield client


def holds(store: Store, client: TestClient, post: Any, caplog: pytest.LogCaptureFixture) -> None:
    before = len(inbox_texts(store))
    caplog.clear()
    with caplog.at_level(logging.ERROR):
        answer = post()
    assert answer.status_code in ACCEPTABLE, (answer.status_code, answer.text)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    rows = inbox_texts(store)
    assert len(rows) - before <= 1
    assert not any(LONE_SURROGATE.search(row) for row in rows[before:])


TELEGRAM = st.sampled_from(golden("telegram")).flatmap(mutated)
SLACK = st.sampled_from(golden("slack")).flatmap(mutated)


@FUZZ
@given(update=TELEGRAM)
def test_telegram_webhook_holds_under_mutated_updates(
    fuzz_client: TestClient,
    fuzz_store: Store,
    caplog: pytest.LogCaptureFixture,
    update: Any,
) -> None:
    body = json.dumps(update).encode()
    headers = {"X-Telegram-Bot-Api-Secret-Token": TG_SECRET, "Content-Type": "application/json"}
    holds(
        fuzz_store,
        fuzz_client,
        lambda: fuzz_client.post("/telegram/webhook", content=body, headers=headers),
        caplog,
    )


@FUZZ
@given(event=SLACK)
def test_slack_events_hold_under_mutated_events(
    fuzz_client: TestClient,
    fuzz_store: Store,
    caplog: pytest.LogCaptureFixture,
    event: Any,
) -> None:
    body = json.dumps(event).encode()
    stamp = str(int(time.time()))
    headers = {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": sign(SLACK_SECRET, stamp, body),
        "Content-Type": "application/json",
    }
    holds(
        fuzz_store,
        fuzz_client,
        lambda: fuzz_client.post("/slack/events", content=body, headers=headers),
        caplog,
    )


def test_the_golden_fixtures_are_there() -> None:
    assert len(golden("telegram")) >= 10 and len(golden("slack")) >= 8
    assert Path(FIXTURES).is_dir()
