"""The receiving half of a platform plug-in: what the gateway app and `hermes gateway <p>` ask.

A platform's descriptor (shared/platforms/) names its `ReceiverPlugin` by reference; the gateway
imports it when it starts. The defaults fit a platform with only webhook routes: override
`build` to return the object whose methods the descriptor's routes name, and the rest as needed.
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping
from typing import Any

from producers.gateway.deps import Gateway
from shared.platforms.descriptor import Platform, load
from shared.settings import PlatformSettings, Settings

Options = Mapping[str, Any]


class GatewayError(RuntimeError):
    """A receiver cannot start (missing credentials, port taken); the message says which."""


class ReceiverPlugin:
    def build(self, gateway: Gateway, conf: Any) -> Any | None:
        """The object the descriptor's routes call, or None: the routes are not mounted."""
        return None

    def options(self, conf: Any, given: Options) -> dict[str, Any]:
        """The options `hermes gateway <p>` runs with: those given (None = unset), else the
        configuration's. Options another platform takes are kept but unused."""
        return {key: value for key, value in given.items() if value is not None}

    def check(self, conf: Any, options: Options) -> None:
        """Raise GatewayError when this configuration cannot start a receiver (beyond the token
        every platform needs)."""

    async def starting(self, gateway: Gateway, conf: Any, options: Options) -> None:
        """Run once before the app serves (register a webhook, say); raise GatewayError."""

    def connection(
        self, gateway: Gateway, conf: Any, options: Options
    ) -> Coroutine[Any, Any, None] | None:
        """The platform's long-lived connection (polling, a socket), or None."""
        return None


def receiver_plugin(platform: Platform) -> ReceiverPlugin:
    plugin = load(platform.receiver)
    if not isinstance(plugin, ReceiverPlugin):
        raise TypeError(f"{platform.receiver} is not a ReceiverPlugin")
    return plugin


def conf_of(settings: Settings, platform: Platform) -> PlatformSettings:
    return settings.platforms.of(platform.name, platform.settings)
