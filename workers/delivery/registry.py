"""Which sender serves which platform: the terminal's, and each configured platform's (built by
the factory its descriptor names; shared/platforms/)."""

from __future__ import annotations

import logging
import time
from functools import partial
from typing import Any

from shared.db.engine import connect
from shared.pipeline.outbox import OutboxRow
from shared.platforms import registry
from shared.platforms.descriptor import load
from shared.redact import install_redaction, secrets_of
from shared.sdks import SENDER, configured_platforms, missing_sdk
from shared.settings import Settings
from shared.store import chats
from workers.delivery.base import Sender, SenderDeps, Sent
from workers.delivery.cli import CliSender
from workers.delivery.live_message import LiveMessages, LocalLiveMessages, RedisLiveMessages
from workers.delivery.progress import LocalProgress, Progress, RedisProgress
from workers.delivery.ratelimit import Limiter, LocalLimiter, RedisLimiter

log = logging.getLogger(__name__)


class UnknownPlatform(LookupError):
    pass


class SdkMissing(RuntimeError):
    """This worker cannot send to a platform: its SDK does not import here."""


class MissingSdkSender:
    """Stands in for a platform whose SDK does not import in this process.

    `hermes worker` refuses to start in that case; only a worker started with
    --skip-missing-sdks (the one a terminal chat brings up) gets here. Its rows fail as a
    transient error, so they retry with backoff (a worker that has the SDK may take them) and
    end as failed with this reason after the bounded attempts — never a crash of the process,
    and never in the way of the terminal's own replies.
    """

    reads_store = False

    def __init__(self, platform: str, reason: str) -> None:
        self.platform = platform
        self.reason = reason

    def send(self, row: OutboxRow) -> Sent:
        raise SdkMissing(self.reason)


class SenderRegistry:
    def __init__(self, senders: list[Sender] | None = None) -> None:
        self._senders: dict[str, Sender] = {}
        self._able: dict[tuple[str, type], Any] = {}
        for sender in senders or []:
            self.add(sender)

    def add(self, sender: Sender) -> None:
        self._senders[sender.platform] = sender
        self._able.clear()

    def get(self, platform: str) -> Sender:
        try:
            return self._senders[platform]
        except KeyError:
            raise UnknownPlatform(f"no sender for platform {platform!r}") from None

    def able(self, platform: str, port: type) -> Any:
        """The platform's sender if it has `port` (a runtime-checkable Protocol: Typist,
        LiveEditor...), else None, also for a platform with no sender. Asked on every turn, so
        the answer is kept: a Protocol check that fails reads each of its members (11-12 us)."""
        try:
            return self._able[(platform, port)]
        except KeyError:
            pass
        sender = self._senders.get(platform)
        found = sender if sender is not None and isinstance(sender, port) else None
        self._able[(platform, port)] = found
        return found

    def platforms(self) -> list[str]:
        """Platforms this process can deliver to (a stand-in for a missing SDK is not one)."""
        return sorted(
            name
            for name, sender in self._senders.items()
            if not isinstance(sender, MissingSdkSender)
        )

    def close(self) -> None:
        """Stop what the senders hold (event loops, HTTP pools); call once the process is done."""
        for sender in self._senders.values():
            closer = getattr(sender, "close", None)
            if callable(closer):
                closer()


def build_senders(settings: Settings, redis_client: Any | None) -> SenderRegistry:
    """Every platform this process can deliver to: the terminal always, others with credentials.

    Rate limits and split-reply progress live in `redis_client` (the broker) so every worker
    shares them; without one (a broker that is not Redis) they are per process, and say so.
    """
    install_redaction(secrets_of(settings))  # model keys and URL passwords too, not only tokens
    registry = SenderRegistry([CliSender(redis_client)])
    configured = configured_platforms(settings)
    if not configured:
        return registry
    if redis_client is None:
        log.warning("no Redis broker: rate limits and reply progress are per worker process")
    limiter: Limiter = RedisLimiter(redis_client) if redis_client is not None else LocalLimiter()
    url = settings.resolved_database_url

    def progress(platform: str) -> Progress:
        if redis_client is None:
            return LocalProgress()
        return RedisProgress(redis_client, url, platform)

    def live(platform: str) -> LiveMessages:
        if redis_client is None:
            return LocalLiveMessages()
        return RedisLiveMessages(redis_client, url, platform)

    for name in configured:
        problem = missing_sdk(name, [SENDER])  # per platform: one missing SDK breaks no other
        if problem is not None:
            log.error("%s", problem)
            registry.add(MissingSdkSender(name, problem))
            continue
        registry.add(_build(name, settings, limiter, progress(name), live(name)))
    return registry


def _build(
    name: str, settings: Settings, limiter: Limiter, progress: Progress, live: LiveMessages
) -> Sender:
    """The platform's sender, from the factory its descriptor names (workers/delivery/<p>.py)."""
    described = registry.get(name)
    deps = SenderDeps(
        settings=settings,
        limiter=limiter,
        progress=progress,
        migrate_chat=partial(_migrate_chat, settings.resolved_database_url),
        live=live,
    )
    sender: Sender = load(described.sender)(settings.platforms.of(name), deps)
    return sender


def _migrate_chat(database_url: str, platform: str, old: str, new: str) -> None:
    """A chat changed id (seen while sending): update state.db in a short unit of work of its own.

    Rare (once per migrated group), so it opens its own connection rather than threading the
    worker's store through every sender.
    """
    store = connect(database_url)
    try:
        with store.write() as conn:
            moved = chats.migrate_chat(conn, platform, old, new, time.time())
        log.info("migrated %s chat %s → %s: %s", platform, old, new, moved)
    finally:
        store.close()
