"""The Signal receiver against the fake daemon: envelopes a store error did not record are
recorded once the store is back (signal-cli has already acknowledged them, so they are held,
not fetched again), and one failing for good is skipped without stopping those behind it."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from producers.gateway.deps import Gateway
from producers.signal.receiver import SignalReceiver
from shared.db import Store
from shared.ports import RecordingWaker
from shared.settings import load_settings
from tests.fakes.background import Background
from tests.fakes.signal_api import ACCOUNT, FakeSignalDaemon, envelope
from tests.fakes.stack import wait_for

pytestmark = pytest.mark.both_databases


def texts(store: Store) -> list[str]:
    with store.read() as conn:
        return [str(r[0]) for r in conn.execute(text("SELECT text FROM inbox ORDER BY id"))]


@pytest.mark.timeout(60)
def test_a_store_error_holds_the_envelopes_until_they_are_recorded(
    hermes_env: dict[str, str], store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeSignalDaemon() as daemon:
        settings = load_settings({**hermes_env, "HERMES_PLATFORMS__SIGNAL__TOKEN": ACCOUNT})
        gateway = Gateway(settings, store, RecordingWaker(), time.time)
        receiver = SignalReceiver(
            gateway, account=ACCOUNT, api_base=daemon.api_base, poll_timeout=1
        )
        real = gateway.record
        failures = {"left": 2}

        async def flaky(turn: Any) -> Any:
            if turn.text == "second" and failures["left"] > 0:
                failures["left"] -= 1
                raise OperationalError(
                    "INSERT INTO inbox …", {}, sqlite3.OperationalError("database is locked")
                )
            if turn.text == "poison":
                raise RuntimeError("fails the same way every time")
            return await real(turn)

        monkeypatch.setattr(gateway, "record", flaky)
        daemon.deliver(
            envelope("first", timestamp=1),
            envelope("second", timestamp=2),
            envelope("poison", timestamp=3),
            envelope("third", timestamp=4),
        )
        with Background(receiver.run):
            wait_for(lambda: len(texts(store)) == 3, timeout=30)
            daemon.deliver(envelope("second", timestamp=2))  # a redelivery: a no-op
            daemon.deliver(envelope("later", timestamp=5))
            wait_for(lambda: len(texts(store)) == 4, timeout=30)
    assert texts(store) == ["first", "second", "third", "later"]
    assert failures["left"] == 0
