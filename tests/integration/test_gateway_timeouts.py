"""A real receiver closes connections that stall while sending a request (issue 21, item 7),
and refuses an unsigned Slack body on its headers alone, before reading it."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fakes.server import free_port
from tests.fakes.stack import redis_db_url, start_gateway

DEADLINE = 1.0  # seconds, for head and body alike in these tests


@pytest.fixture
def receiver(hermes_env: dict[str, str], hermes_home: Path, redis_url: str) -> Iterator[int]:
    port = free_port()
    env = {
        **hermes_env,
        "HERMES_BROKER_URL": redis_db_url(redis_url),
        "HERMES_GATEWAY__PORT": str(port),
        "HERMES_GATEWAY__READ_HEAD_SECONDS": str(DEADLINE),
        "HERMES_GATEWAY__READ_BODY_SECONDS": str(DEADLINE),
        "HERMES_PLATFORMS__SLACK__TOKEN": "xoxb-timeouts",
        "HERMES_PLATFORMS__SLACK__SIGNING_SECRET": "timeouts-signing-secret",
    }
    proc = start_gateway(env, hermes_home, "slack", port)
    try:
        yield port
    finally:
        assert proc.stop() == 0, proc.output()


def closed_after(port: int, sent: bytes, limit: float = 10.0) -> float:
    """Send `sent`, then nothing; seconds until the server closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=limit) as conn:
        started = time.monotonic()
        if sent:
            conn.sendall(sent)
        received = b""
        while True:
            chunk = conn.recv(4096)  # raises socket.timeout if the server never closes
            if not chunk:
                return time.monotonic() - started
            received += chunk


HEAD = b"POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


@pytest.mark.parametrize(
    "sent",
    [
        b"",  # connects and says nothing
        HEAD,  # a head that never ends (slowloris)
        HEAD + b"Content-Length: 1000\r\n\r\n" + b'{"type": "event_callback", ',  # a stalled body
    ],
    ids=["idle", "partial-head", "partial-body"],
)
def test_a_stalled_request_is_cut_off(receiver: int, sent: bytes) -> None:
    assert closed_after(receiver, sent) < DEADLINE + 4
    # and the receiver still answers the next client
    assert httpx.get(f"http://127.0.0.1:{receiver}/healthz", timeout=10).status_code == 200


def test_an_unsigned_slack_body_is_refused_before_it_is_read(receiver: int) -> None:
    head = HEAD + b"Content-Length: 1000000\r\n\r\n"  # promises 1 MB, sends none of it
    with socket.create_connection(("127.0.0.1", receiver), timeout=10) as conn:
        conn.sendall(head)
        answer = b""
        while b"missing" not in answer:  # the head and the body may come in two reads
            chunk = conn.recv(4096)
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 401")
    assert b"missing X-Slack-Request-Timestamp or X-Slack-Signature" in answer
