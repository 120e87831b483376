"""A reply cut off on its way to the platform never arrives after its chat lane could have moved
(workers/delivery/sockets.py): the host is cut while the send is in flight, brought back later,
and the platform must not get that old copy then. Without the senders' socket options it does,
which the second case shows (so the first can fail).

The Telegram sender runs in a host namespace this test makes (tests/shims/cut_off_sender.py);
the fake Bot API listens on the bridge in the test's own namespace.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import netns_kit
from tests.fakes.server import Served
from tests.fakes.telegram_api import FakeTelegram
from workers.delivery import sockets

pytestmark = [pytest.mark.netns]

SHIM = Path(__file__).resolve().parents[1] / "shims" / "cut_off_sender.py"
ROOT = Path(__file__).resolve().parents[2]
TOKEN = "424242424:AAFakeTokenForTheCutOffSender"
LEASE = 3.0  # a lane lease of 3 s: the kernel gives up on unacknowledged bytes after 1 s
CUT_SECONDS = 5.0  # past the lane's lease: another worker would have taken the lane by then


@pytest.fixture
def network() -> Iterator[netns_kit.Network]:
    with netns_kit.network_for_test() as net:
        yield net


class Shim:
    """The sender process in its host: one line in per reply, one line out per outcome."""

    def __init__(self, host: netns_kit.Host, api_base: str, lease: float) -> None:
        self.proc = subprocess.Popen(
            host.argv(sys.executable, str(SHIM), api_base, str(lease)),
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def send(self, n: int) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()

    def outcome(self, timeout: float) -> str:
        return self.lines.get(timeout=timeout)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


def _run(network: netns_kit.Network, lease: float) -> tuple[list[str], str]:
    """Reply 1 sent normally; reply 2 sent with the host cut off, which comes back after
    CUT_SECONDS. Returns what the Bot API got (texts, in order) and reply 2's outcome."""
    host = network.add_host("sender")
    telegram = FakeTelegram(TOKEN)
    telegram.served = Served(telegram.app(), host=network.gateway_ip)
    telegram.served.start()
    shim = Shim(host, telegram.api_base, lease)
    try:
        shim.send(1)
        assert shim.outcome(60) == "sent 1"  # the connection is open and kept alive
        network.cut(host)
        shim.send(2)  # its bytes leave for a platform that no longer answers
        time.sleep(CUT_SECONDS)
        network.restore(host)
        second = shim.outcome(60)  # without the options: when the late copy was answered
        time.sleep(3.0)  # anything still retransmitted has had its chance to arrive
        return [str(p["text"]) for p in telegram.sent()], second
    finally:
        shim.close()
        telegram.served.stop()


def test_a_send_cut_off_midway_never_reaches_the_platform_later(
    network: netns_kit.Network,
) -> None:
    assert sockets.unacked_limit(LEASE) < CUT_SECONDS
    texts, second = _run(network, LEASE)
    assert second.startswith("failed 2"), second  # the flush retries it (the lane's order)
    assert texts == ["reply 1"], texts


def test_without_the_socket_options_the_cut_off_copy_arrives_late(
    network: netns_kit.Network,
) -> None:
    """What the options prevent: the kernel retransmits the old request once the host is back."""
    texts, second = _run(network, 0)
    assert texts == ["reply 1", "reply 2"], texts
    assert second == "sent 2", second
