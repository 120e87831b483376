"""Which parts of a split reply were already sent, so a retry resumes instead of repeating.

A long reply is one outbox row sent as several messages. After each part is accepted by the
platform its message id is appended here (Redis list per row, kept a day); a retry of the row
(429 halfway, a dropped connection, a worker killed between parts, or a lost lease after the
last part) starts after the parts already listed, so no part is sent twice unless the process
died between the platform's answer and this append — the one window at-least-once leaves.
Keys are namespaced by the state database, since outbox row ids are only unique within one.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any, Protocol

KEEP_SECONDS = 24 * 3600


class Progress(Protocol):
    def sent_parts(self, row_id: int) -> list[str]: ...

    def part_sent(self, row_id: int, message_id: str) -> None: ...


def namespace(database_url: str) -> str:
    return hashlib.sha256(database_url.encode()).hexdigest()[:12]


class RedisProgress:
    def __init__(self, client: Any, database_url: str, platform: str) -> None:
        self._client = client
        self._prefix = f"hermes:parts:{namespace(database_url)}:{platform}:"

    def sent_parts(self, row_id: int) -> list[str]:
        values = self._client.lrange(self._prefix + str(row_id), 0, -1)
        return [v.decode() if isinstance(v, bytes) else str(v) for v in values]

    def part_sent(self, row_id: int, message_id: str) -> None:
        key = self._prefix + str(row_id)
        pipe = self._client.pipeline(transaction=True)
        pipe.rpush(key, message_id)
        pipe.expire(key, KEEP_SECONDS)
        pipe.execute()


class LocalProgress:
    """The cheap twin (one process): same contract, kept in memory."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parts: dict[int, list[str]] = {}

    def sent_parts(self, row_id: int) -> list[str]:
        with self._lock:
            return list(self._parts.get(row_id, []))

    def part_sent(self, row_id: int, message_id: str) -> None:
        with self._lock:
            self._parts.setdefault(row_id, []).append(message_id)
