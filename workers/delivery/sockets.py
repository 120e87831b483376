"""The senders' sockets: a reply cut off on its way to a platform dies before its lane can move.

A chat lane's lease (workers/flush.py) lets one worker send a chat's replies, in order. A worker
cut off from the network in the middle of a send keeps that request's bytes in its kernel, which
retransmits them for many minutes; if the network comes back after another worker took the lane
over and sent the same reply and the next ones, the platform would get the old copy late: a
reply twice and out of order. So every sender's connections carry TCP_USER_TIMEOUT: bytes the
platform's host has not acknowledged within `unacked_limit` make the kernel drop the connection
and its unsent data, well before the lane's lease can expire (it is renewed every `renew_every`
and lasts `lane_ttl`). A live platform acknowledges at the TCP level at once, however long its
answer takes, so slow platforms are not cut short.

Bytes the platform did acknowledge before a cut may still be acted on: that reply is sent again
by the next holder (at least once, DESIGN §2.4), in order.

How each client is given the options: httpx through `http_transport` (which still honours the
environment's proxies), aiohttp through `socket_factory`, requests through an adapter
(workers/delivery/sms.py), python-telegram-bot through HTTPXRequest. Slack's WebClient (urllib)
has no such hook, so its connections go without.
"""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

LANE_TTL = 10.0  # at most; a fleet with shorter session leases uses theirs (lane_ttl)

SocketOption = tuple[int, int, int]


def lane_ttl(lease_seconds: float) -> float:
    """How long a dead holder keeps a lane: LANE_TTL, or the session lease when shorter."""
    return min(LANE_TTL, lease_seconds)


def renew_every(lease_seconds: float) -> float:
    """How often the worker's Renewer extends what it holds (workers/renewer.py)."""
    return min(lease_seconds / 3, 1.0)


def unacked_limit(lease_seconds: float) -> float:
    """How long a send's bytes may go unacknowledged: half of what is left of a lane's lease
    after its last renewal, so the kernel gives up on a cut-off send while the lane is still
    this worker's."""
    ttl = lane_ttl(lease_seconds)
    return max(0.2, (ttl - renew_every(lease_seconds)) / 2)


def socket_options(lease_seconds: float) -> Sequence[SocketOption]:
    """The options every sender's connection is opened with (none where the OS lacks them)."""
    option = getattr(socket, "TCP_USER_TIMEOUT", None)
    if option is None:  # pragma: no cover - Linux has it; elsewhere the lane's order is weaker
        return ()
    return ((socket.IPPROTO_TCP, option, int(unacked_limit(lease_seconds) * 1000)),)


def _configured(sock: socket.socket, options: Sequence[SocketOption]) -> socket.socket:
    try:
        for level, name, value in options:
            sock.setsockopt(level, name, value)
    except OSError:
        sock.close()
        raise
    return sock


def socket_factory(options: Sequence[SocketOption]) -> Callable[[tuple[Any, ...]], socket.socket]:
    """For aiohttp's `TCPConnector(socket_factory=...)` (aiohttp ≥ 3.12): each socket is made
    with `options` before it connects (aiohttp still sets TCP_NODELAY on it)."""
    chosen = tuple(options)

    def make(addr_info: tuple[Any, ...]) -> socket.socket:
        family, kind, proto = addr_info[0], addr_info[1], addr_info[2]
        return _configured(socket.socket(family=family, type=kind, proto=proto), chosen)

    return make


def http_transport(options: Sequence[SocketOption]) -> httpx.BaseTransport:
    """An httpx transport whose connections carry `options` (httpcore adds TCP_NODELAY).

    An httpx client given a transport ignores HTTP(S)_PROXY / ALL_PROXY / NO_PROXY, so this
    one reads them itself (as urllib does) and sends through the named proxy. The options are
    handed to the proxy's transport too, but httpcore (1.0.x) does not pass them on to the
    connections it opens to a proxy: behind one, a cut-off send is not dropped early.
    """
    import httpx

    class EnvironmentProxies(httpx.BaseTransport):
        def __init__(self) -> None:
            self.direct = httpx.HTTPTransport(socket_options=list(options))
            self.proxies = {
                scheme: httpx.HTTPTransport(
                    proxy=url if "://" in url else f"http://{url}", socket_options=list(options)
                )
                for scheme, url in urllib.request.getproxies().items()
                if scheme in ("http", "https", "all") and url
            }

        def route(self, url: httpx.URL) -> httpx.BaseTransport:
            proxy = self.proxies.get(url.scheme) or self.proxies.get("all")
            if proxy is None or urllib.request.proxy_bypass(url.host):
                return self.direct
            return proxy

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            return self.route(request.url).handle_request(request)

        def close(self) -> None:
            for transport in (self.direct, *self.proxies.values()):
                transport.close()

    return EnvironmentProxies()
