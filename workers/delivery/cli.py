"""The terminal's sender: the reply is already in state.db; ping the waiting terminal."""

from __future__ import annotations

import json
import logging
from typing import Any

from shared.store.outbox import OutboxRow
from workers.delivery.base import Sent

log = logging.getLogger(__name__)


def channel_for(chat_id: str) -> str:
    return f"hermes:cli:{chat_id}"


class CliSender:
    """A terminal reads its replies from the outbox; a Redis publish wakes it at once."""

    platform = "cli"
    reads_store = True  # the terminal reads the outbox; the publish only saves it a poll

    def __init__(self, redis_client: Any | None) -> None:
        self._redis = redis_client

    def send(self, row: OutboxRow) -> Sent:
        if self._redis is not None:
            note = json.dumps({"outbox_id": row.id, "turn_id": row.turn_id})
            try:
                self._redis.publish(channel_for(row.chat_id), note)
            except Exception as exc:  # the terminal polls too; a lost ping only slows it
                log.warning("could not notify terminal %s: %s", row.chat_id, exc)
        return Sent(platform_message_id=f"cli-{row.id}")
