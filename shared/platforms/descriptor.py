"""`Platform`: everything hermes needs to know about one chat platform, as data.

A descriptor imports nothing heavy: its receiver, sender and attachment fetcher are named as
`"module:attribute"` strings (`load` imports them when a process needs them), so `shared` stays
free of producers, workers and platform SDKs, and a worker never imports a receiver.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from shared.platforms import CHANNEL
from shared.settings import PlatformSettings


@dataclass(frozen=True, slots=True)
class Sdk:
    module: str  # what `import` needs
    requirement: str  # what pip installs (the name as pyproject.toml spells it)


@dataclass(frozen=True, slots=True)
class Route:
    """One HTTP route of the gateway app: `handler` is the name of the receiver's method."""

    path: str
    handler: str
    methods: tuple[str, ...] = ("POST",)


def _any_channel(chat_id: str) -> str:
    return CHANNEL


def _no_limits() -> Mapping[str, tuple[float, float]]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Platform:
    """One platform. `receiver`, `sender` and `fetcher` are `"module:attribute"` references:

    - `receiver`: a producers.gateway.plugin.ReceiverSide (builds the object whose methods
      `routes` name, checks the configuration, runs a long-lived connection if any);
    - `sender`: a callable `(conf, SenderDeps) -> Sender` (workers/delivery/<p>.py);
    - `fetcher`: a callable `(conf) -> Fetcher` for the turn's attachments, or None.
    """

    name: str  # as in `platforms.<name>.*`, session keys and `hermes gateway <name>`
    title: str  # for people: "Telegram"
    order: int  # where it comes in lists (CLI choices, `hermes up`, /healthz): lowest first
    settings: type[PlatformSettings]
    receiver: str
    sender: str
    fetcher: str | None = None
    routes: tuple[Route, ...] = ()
    message_limit: int = 4000  # one reply part at most, measured by `utf16` or in characters
    utf16: bool = False  # the limit counts UTF-16 code units (Telegram), not characters
    # Token buckets per send, name → (tokens per second, burst): "chat", "group", "bot", …
    rate_limits: Mapping[str, tuple[float, float]] = field(default_factory=_no_limits)
    secrets: tuple[str, ...] = ("token",)  # settings fields redacted from every log line
    quiet_loggers: tuple[str, ...] = ()  # the SDK's loggers: set to WARNING and redacted
    redacted_loggers: tuple[str, ...] = ()  # more of its loggers: redacted
    chat_type_of: Callable[[str], str] = _any_channel  # the chat type an id alone suggests
    # A chat's session key follows from its id alone (its keys carry no workspace scope), so
    # a configured home channel can be handed off to before anyone has written there.
    keys_from_chat_id: bool = False
    compose_service: str | None = None  # its receiver's service in compose.yaml
    receiver_sdks: tuple[Sdk, ...] = ()
    sender_sdks: tuple[Sdk, ...] = ()


def spoken_list(words: list[str]) -> str:
    """ "a", "a or b", "a, b or c"."""
    return " or ".join(filter(None, [", ".join(words[:-1]), *words[-1:]]))


def load(reference: str) -> Any:
    """The object a `"module:attribute"` reference names, imported now."""
    module, _, attribute = reference.partition(":")
    if not module or not attribute:
        raise ValueError(f"{reference!r} is not a 'module:attribute' reference")
    found: Any = getattr(importlib.import_module(module), attribute)
    return found
