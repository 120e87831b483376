"""The sender port: send one outbox row, or say why not (retry later, or never)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from shared.pipeline.outbox import OutboxRow
from shared.settings import Settings
from workers.delivery import sockets
from workers.delivery.live_message import LiveMessages, LocalLiveMessages
from workers.delivery.progress import Progress
from workers.delivery.ratelimit import Limiter
from workers.delivery.sockets import SocketOption


@dataclass(frozen=True, slots=True)
class Sent:
    platform_message_id: str | None


class RetryLater(Exception):
    """The platform asked us to wait (429 retry_after) or was briefly unreachable."""

    def __init__(self, after: float, reason: str) -> None:
        super().__init__(reason)
        self.after = after
        self.reason = reason


class ThreadUnavailable(Exception):
    """A thread could not be opened (no permission, topics off): use the channel itself."""


@runtime_checkable
class ThreadOpener(Protocol):
    """A sender that can open a thread in a channel (Telegram topic, Discord thread, Slack
    seed message); returns the thread id replies then carry as `thread_id`."""

    def open_thread(self, chat_id: str, title: str) -> str: ...


@runtime_checkable
class Typist(Protocol):
    """A sender that can show "typing…" in a chat while a turn runs (Telegram's chat action,
    Discord's typing trigger); the indicator fades by itself, so it is refreshed."""

    typing_every: float  # seconds between refreshes (Telegram's indicator lasts 5 s)

    def typing(self, chat_id: str, thread_id: str | None) -> None: ...


@runtime_checkable
class LiveEditor(Protocol):
    """A sender that can stream a reply into one message (`platforms.<p>.stream_edits`): post
    it early, edit it as the reply grows (workers/stream_edits.py). Both take a token from the
    fleet's buckets first and raise RetryLater when there is none; `edit_live` raises
    MessageGone when the message cannot be edited any more."""

    live: LiveMessages | None  # None: stream_edits is off for this platform
    stream_interval: float  # seconds between edits (`stream_edit_interval`)

    def post_live(self, row: OutboxRow, text: str) -> str: ...

    def edit_live(self, row: OutboxRow, message_id: str, text: str) -> None: ...


class Undeliverable(Exception):
    """This message can never be delivered (user blocked the bot, chat gone)."""


class Sender(Protocol):
    platform: str
    # True when the platform's client reads its replies from state.db (the terminal): the
    # commit that writes a reply delivers it, and `send` only nudges the reader to look now.
    reads_store: bool

    def send(self, row: OutboxRow) -> Sent: ...


@dataclass(frozen=True, slots=True)
class SenderDeps:
    """What a platform's sender factory (`build(conf, deps)`) gets besides its settings."""

    settings: Settings
    limiter: Limiter  # fleet-wide token buckets and 429 cooldowns
    progress: Progress  # which parts of a split reply are already sent
    migrate_chat: Callable[[str, str, str], None]  # (platform, old id, new id) in state.db
    # Where each turn's streamed message is (stream_edits); shared through Redis like progress.
    live: LiveMessages = field(default_factory=LocalLiveMessages)

    @property
    def socket_options(self) -> Sequence[SocketOption]:
        """For every connection the sender opens to its platform (workers/delivery/sockets.py)."""
        return sockets.socket_options(self.settings.pipeline.lease_seconds)


class MemorySender:
    """The cheap twin: keeps what it was asked to send."""

    def __init__(self, platform: str, *, reads_store: bool = False) -> None:
        self.platform = platform
        self.reads_store = reads_store
        self.sent: list[OutboxRow] = []

    def send(self, row: OutboxRow) -> Sent:
        self.sent.append(row)
        return Sent(platform_message_id=f"mem-{row.id}")
