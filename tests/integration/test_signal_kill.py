"""A Signal receiver killed mid-receive (SIGKILL of a real `hermes gateway signal` process):
what is kept and what is lost, as producers/signal/receiver.py says.

signal-cli-rest-api offers no acknowledgement and no redelivery: its receive acknowledges the
envelopes it takes to Signal's servers before it answers. So:
- envelopes committed before the kill are kept, and not recorded twice after the restart;
- envelopes still waiting on the daemon (Signal's servers) are kept: the restarted receiver
  takes them;
- the envelopes of the receive in flight at the kill are lost — only those, and never more
  than `receive_max_messages`, the bound this receiver sets on every receive.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from sqlalchemy import text

from shared.db import Store
from tests.fakes.server import free_port
from tests.fakes.signal_api import ACCOUNT, FakeSignalDaemon, envelope
from tests.fakes.stack import Proc, redis_db_url, wait_for

pytestmark = pytest.mark.both_databases

REDIS_DB = 7


def texts(store: Store) -> list[str]:
    with store.read() as conn:
        return [str(r[0]) for r in conn.execute(text("SELECT text FROM inbox ORDER BY id"))]


def gateway(env: dict[str, str], log: Path) -> Proc:
    return Proc(env, log, "gateway", "signal", "-l", "INFO")


@pytest.mark.timeout(240)
def test_a_killed_receiver_loses_only_the_receive_in_flight(
    hermes_env: dict[str, str], hermes_home: Path, redis_url: str, store: Store
) -> None:
    with FakeSignalDaemon() as daemon:
        env = {
            **hermes_env,
            "HERMES_BROKER_URL": redis_db_url(redis_url, REDIS_DB),
            "HERMES_GATEWAY__PORT": str(free_port()),
            "HERMES_PLATFORMS__SIGNAL__TOKEN": ACCOUNT,
            "HERMES_PLATFORMS__SIGNAL__API_BASE": daemon.api_base,
            "HERMES_PLATFORMS__SIGNAL__POLL_TIMEOUT": "1",
            "HERMES_PLATFORMS__SIGNAL__RECEIVE_MAX_MESSAGES": "2",
        }
        first = gateway(env, hermes_home / "first.log")
        try:
            daemon.deliver(envelope("kept 1", timestamp=1), envelope("kept 2", timestamp=2))
            wait_for(lambda: texts(store) == ["kept 1", "kept 2"], timeout=90)
            assert "signal" in first.output()
            # the next receive takes two envelopes and is killed before it answers
            daemon.stall()
            daemon.deliver(
                envelope("in flight 1", timestamp=3),
                envelope("in flight 2", timestamp=4),
                envelope("still on the server", timestamp=5),
            )
            wait_for(lambda: len(daemon.taken_unanswered) == 2, timeout=60)
            os.killpg(first.proc.pid, signal.SIGKILL)
            first.proc.wait(timeout=30)
        finally:
            daemon.release()
            first.stop()
        daemon.deliver(envelope("kept 2", timestamp=2))  # a redelivery: a no-op
        daemon.deliver(envelope("after the restart", timestamp=6))
        second = gateway(env, hermes_home / "second.log")
        try:
            wait_for(lambda: len(texts(store)) >= 4, timeout=90)
            wait_for(lambda: not daemon.queued, timeout=30)
        finally:
            second.stop()
        params = daemon.receive_params
    assert texts(store) == ["kept 1", "kept 2", "still on the server", "after the restart"]
    lost = [item["envelope"]["dataMessage"]["message"] for item in daemon.taken_unanswered]
    assert lost == ["in flight 1", "in flight 2"]  # the receive in flight, and only it
    assert params and all(p.get("max_messages") == "2" for p in params)
    assert all(p.get("timeout") == "1" for p in params)
