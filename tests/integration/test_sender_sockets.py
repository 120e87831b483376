"""Every sender that can carries TCP_USER_TIMEOUT on its connections (workers/delivery/sockets.py):
a reply cut off midway must die in the kernel before the chat's lane can move to another worker.

Each platform's real sender, built by its factory (build_senders), sends one reply through a
TCP relay on 127.0.0.1 to the platform's fake. The sender runs in this process, so when a
connection's first bytes reach the relay, the relay finds the client's end of that connection
among this process's sockets (psutil, by its addresses) and reads the option off it. Slack is
not here: its WebClient (urllib) has no hook for socket options.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psutil
import pytest

from shared.db import open_store
from shared.settings import load_settings
from tests.fakes.bot_connector import FakeBotConnector
from tests.fakes.delivery import delivery_runtime, reply
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.graph_api import FakeGraph
from tests.fakes.matrix_api import BOT, FakeMatrix
from tests.fakes.signal_api import ACCOUNT as SIGNAL_ACCOUNT
from tests.fakes.signal_api import FakeSignalDaemon
from tests.fakes.stack import redis_db_url
from tests.fakes.telegram_api import FakeTelegram
from tests.fakes.twilio_api import ACCOUNT as TWILIO_ACCOUNT
from tests.fakes.twilio_api import NUMBER, FakeTwilio
from tests.fakes.twilio_api import TOKEN as TWILIO_TOKEN
from workers.delivery.sockets import unacked_limit
from workers.flush import flush

TCP_USER_TIMEOUT = getattr(socket, "TCP_USER_TIMEOUT", None)
pytestmark = pytest.mark.skipif(TCP_USER_TIMEOUT is None, reason="TCP_USER_TIMEOUT is Linux's")


def client_option(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """TCP_USER_TIMEOUT (ms) on this process's socket connected from `client` to `server`."""
    for conn in psutil.Process().net_connections(kind="tcp4"):
        if conn.fd < 0 or tuple(conn.laddr) != client or tuple(conn.raddr) != server:
            continue
        try:
            with socket.socket(fileno=os.dup(conn.fd)) as sock:
                if sock.getsockname() != client or sock.getpeername() != server:
                    continue  # the descriptor was closed and reused meanwhile
                return sock.getsockopt(socket.IPPROTO_TCP, TCP_USER_TIMEOUT or 0)
        except OSError:
            continue
    return None


class Relay:
    """Forwards 127.0.0.1:<port> to `target`, noting TCP_USER_TIMEOUT on each client's end."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address: tuple[str, int] = self.listener.getsockname()
        self.seen: list[int | None] = []  # per connection, in the order their bytes came
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, base: str) -> str:
        """`base` (the fake's URL) with the relay's address in its place."""
        parts = urlsplit(base)
        return urlunsplit(parts._replace(netloc="{}:{}".format(*self.address)))

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            first = conn.recv(65536)  # the client set its options before it sent anything
            if not first:
                return
            value = client_option(conn.getpeername(), self.address)
            with self._lock:
                self.seen.append(value)
            with socket.create_connection(self.target) as upstream:
                upstream.sendall(first)
                back = threading.Thread(target=_pipe, args=(upstream, conn), daemon=True)
                back.start()
                _pipe(conn, upstream)
                back.join(10)

    def close(self) -> None:
        self.listener.close()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass


@contextmanager
def relayed(base: str) -> Iterator[tuple[Relay, str]]:
    parts = urlsplit(base)
    relay = Relay((parts.hostname or "127.0.0.1", parts.port or 80))
    try:
        yield relay, relay.url(base)
    finally:
        relay.close()


# Per platform: the fake, and (fake, the relay's URL for it) → the settings and a chat id.
Setup = Callable[[Any, Callable[[str], str]], tuple[dict[str, str], str]]
CASES: dict[str, tuple[Callable[[], AbstractContextManager[Any]], Callable[[Any], str], Setup]] = {
    "telegram": (
        lambda: FakeTelegram("123456789:AAFakeTokenForSocketsSecret"),
        lambda fake: fake.api_base,
        lambda fake, via: (
            {
                "HERMES_PLATFORMS__TELEGRAM__TOKEN": fake.token,
                "HERMES_PLATFORMS__TELEGRAM__API_BASE": via(fake.api_base),
            },
            "4242",
        ),
    ),
    "discord": (
        lambda: FakeDiscord("OTAw.fake-discord-token.SocketsSecret"),
        lambda fake: fake.api_base,
        lambda fake, via: (
            {
                "HERMES_PLATFORMS__DISCORD__TOKEN": "OTAw.fake-discord-token.SocketsSecret",
                "HERMES_PLATFORMS__DISCORD__API_BASE": via(fake.api_base),
            },
            "500",
        ),
    ),
    "signal": (
        FakeSignalDaemon,
        lambda fake: fake.api_base,
        lambda fake, via: (
            {
                "HERMES_PLATFORMS__SIGNAL__TOKEN": SIGNAL_ACCOUNT,
                "HERMES_PLATFORMS__SIGNAL__API_BASE": via(fake.api_base),
            },
            "+15557770001",
        ),
    ),
    "whatsapp": (
        lambda: FakeGraph("EAAGwhatsappSocketsTokenSecret", "106540352242922"),
        lambda fake: fake.api_base,
        lambda fake, via: (
            {
                "HERMES_PLATFORMS__WHATSAPP__TOKEN": fake.token,
                "HERMES_PLATFORMS__WHATSAPP__PHONE_NUMBER_ID": fake.phone_number_id,
                "HERMES_PLATFORMS__WHATSAPP__API_BASE": via(fake.api_base),
            },
            "15551234567",
        ),
    ),
    "sms": (
        FakeTwilio,
        lambda fake: fake.api_base,
        lambda fake, via: (
            {
                "HERMES_PLATFORMS__SMS__TOKEN": TWILIO_TOKEN,
                "HERMES_PLATFORMS__SMS__ACCOUNT_SID": TWILIO_ACCOUNT,
                "HERMES_PLATFORMS__SMS__FROM_NUMBER": NUMBER,
                "HERMES_PLATFORMS__SMS__API_BASE": via(fake.api_base),
            },
            "+14155550123",
        ),
    ),
    "teams": (  # the bot token is asked for directly; the reply goes through the relay
        lambda: FakeBotConnector("3f1c6c1e-7c2a-4f0b-9d47-2b5f0a6c8e11", "teams-sockets-pw"),
        lambda fake: fake.base,
        lambda fake, via: (
            {
                **fake.settings(),
                "HERMES_PLATFORMS__TEAMS__API_BASE": via(fake.service_url),
            },
            "a:1Dy3ffTjWsJnAbfmsSsKyrQqmx0fJ9cErqvmCpJyP43Gwkq",
        ),
    ),
    "matrix": (
        lambda: FakeMatrix("syt_matrix_sockets_token_secret"),
        lambda fake: fake.base,
        lambda fake, via: (
            {
                "HERMES_PLATFORMS__MATRIX__TOKEN": fake.token,
                "HERMES_PLATFORMS__MATRIX__HOMESERVER": via(fake.base),
                "HERMES_PLATFORMS__MATRIX__USER_ID": BOT,
            },
            "!dm:fake.test",
        ),
    ),
}


@pytest.mark.parametrize("platform", sorted(CASES))
def test_a_senders_connections_carry_tcp_user_timeout(
    platform: str, hermes_env: dict[str, str], redis_url: str
) -> None:
    make_fake, base_of, setup = CASES[platform]
    with make_fake() as fake, relayed(base_of(fake)) as (relay, _):
        env, chat_id = setup(fake, relay.url)
        settings = load_settings(
            {**hermes_env, "HERMES_BROKER_URL": redis_db_url(redis_url), **env}
        )
        store = open_store(settings.resolved_database_url)
        try:
            with delivery_runtime(settings, store) as (rt, _):
                reply(store, platform, chat_id, "through the relay")
                assert flush(rt, f"{platform}:{chat_id}").sent == 1
        finally:
            store.close()
    expected = int(unacked_limit(settings.pipeline.lease_seconds) * 1000)
    assert relay.seen, f"{platform}: nothing went through the relay"
    assert relay.seen == [expected] * len(relay.seen), f"{platform}: {relay.seen}"


@contextmanager
def proxied(
    platform: str, hermes_env: dict[str, str], redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Relay]:
    """One reply sent through HTTP_PROXY (the relay, in front of the fake); the platform's
    host does not resolve, so only the proxy can reach it."""
    for name in ("no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    make_fake, base_of, setup = CASES[platform]
    with make_fake() as fake, relayed(base_of(fake)) as (relay, _):
        monkeypatch.setenv("HTTP_PROXY", "http://{}:{}".format(*relay.address))
        env, chat_id = setup(fake, lambda base: base.replace("127.0.0.1", "platform.invalid"))
        settings = load_settings(
            {**hermes_env, "HERMES_BROKER_URL": redis_db_url(redis_url), **env}
        )
        store = open_store(settings.resolved_database_url)
        try:
            with delivery_runtime(settings, store) as (rt, _):
                reply(store, platform, chat_id, "through the proxy")
                assert flush(rt, f"{platform}:{chat_id}").sent == 1
        finally:
            store.close()
    assert relay.seen, f"{platform}: the proxy was not used"
    yield relay


def test_twilios_connections_to_a_proxy_carry_the_option_too(
    hermes_env: dict[str, str], redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with proxied("sms", hermes_env, redis_url, monkeypatch) as relay:
        lease = load_settings(hermes_env).pipeline.lease_seconds
        assert relay.seen == [int(unacked_limit(lease) * 1000)] * len(relay.seen)


@pytest.mark.parametrize("platform", ["discord", "signal", "teams", "whatsapp"])
def test_the_httpx_senders_still_go_through_a_proxy_from_the_environment(
    platform: str, hermes_env: dict[str, str], redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """httpx ignores the environment's proxies when given a transport; ours reads them. (The
    proxied connection goes without the option: httpcore 1.0.x does not pass it on.)"""
    with proxied(platform, hermes_env, redis_url, monkeypatch):
        pass
