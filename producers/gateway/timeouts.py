"""Deadlines on reading a request, which uvicorn does not set itself.

uvicorn closes a keep-alive connection idle between requests, but a connection that never
finishes its head (slowloris), trickles its body, or sends nothing at all after connecting
stays open for as long as the client likes: each holds a socket and, for a body, a task. Here
a request's head must arrive within `gateway.read_head_seconds` of the connection opening (or
of its first byte, on a kept-alive connection), and its body within `gateway.read_body_seconds`
of the head;
otherwise the connection is closed. Platforms send small bodies at once, so the bounds can be
tight without refusing a real webhook.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from shared.sections import GatewaySettings

HEAD_SECONDS = 10.0
BODY_SECONDS = 20.0


class DeadlineHttpTools(HttpToolsProtocol):
    """uvicorn's httptools protocol with the two reading deadlines above."""

    head_seconds = HEAD_SECONDS
    body_seconds = BODY_SECONDS
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._arm(self.head_seconds)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._deadline is None:  # a kept-alive connection's next request
            self._arm(self.head_seconds)

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._arm(self.body_seconds)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()


def deadline_protocol(gateway: GatewaySettings) -> type[DeadlineHttpTools]:
    """The protocol class for uvicorn's `http=`, with the configured deadlines."""
    return type(
        "ConfiguredDeadlineHttpTools",
        (DeadlineHttpTools,),
        {"head_seconds": gateway.read_head_seconds, "body_seconds": gateway.read_body_seconds},
    )
