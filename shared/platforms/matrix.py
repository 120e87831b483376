"""Matrix: the client-server API's `/sync` long poll in, `room_send` out (matrix-nio, both).

Unencrypted rooms only: no olm keys are made, so an encrypted room's messages arrive as
`m.room.encrypted` and are ignored. A room with more than two members is a group; a message
with an `m.thread` relation belongs to the thread its root event anchors.
"""

from __future__ import annotations

from typing import ClassVar

from shared.platforms import GROUP
from shared.platforms.descriptor import Platform, Sdk
from shared.settings import PlatformSettings

MATRIX = "matrix"
NIO = Sdk("nio", "matrix-nio")


class MatrixSettings(PlatformSettings):
    blank_is_unset: ClassVar[frozenset[str]] = PlatformSettings.blank_is_unset | {
        "homeserver",
        "user_id",
    }

    homeserver: str | None = None  # https://matrix.example.org (the client-server API's root)
    user_id: str | None = None  # the bot's @user:server (the token's owner)
    sync_timeout_ms: int = 30_000  # how long one /sync long poll waits for news


def chat_type_of(chat_id: str) -> str:
    """A room id alone does not say how many members it has: a group until seen otherwise."""
    return GROUP


PLATFORM = Platform(
    name=MATRIX,
    order=60,
    title="Matrix",
    settings=MatrixSettings,
    receiver="producers.matrix.plugin:PLUGIN",
    sender="workers.delivery.matrix:build",
    fetcher="workers.delivery.matrix:fetcher",
    message_limit=16_000,  # characters of one m.text body (events are capped at 64 KiB)
    # Synapse's default: about 0.2 messages/s per user after a burst of 10; a room gets 1/s.
    rate_limits={"room": (1.0, 5.0), "account": (0.2, 10.0)},
    secrets=("token",),
    quiet_loggers=("nio", "nio.client", "nio.responses", "nio.rooms"),
    compose_service="matrix",
    receiver_sdks=(NIO,),
    sender_sdks=(NIO,),
)
