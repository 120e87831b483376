"""The message a turn's reply is streamed into (`platforms.<p>.stream_edits`), remembered so the
outbox's delivery finishes that message instead of sending a new one.

A turn's worker posts one message early and edits it as the reply grows (workers/stream_edits.py)
and records where it is here, per turn, in Redis (namespaced by the state database, kept a
day, like workers/delivery/progress.py). The committed reply is still delivered by the outbox:
its first row for that chat claims the message (once: the claim names the row, so a retry of
the same row finds its own claim) and its first part is an edit of it; further parts of a split
reply are new messages. Edits set the whole text, so repeating one is harmless: that is what
keeps "nothing sent twice" when a worker dies anywhere:

- killed while streaming: the turn runs again on another worker, which finds the message here
  and keeps editing it; the outbox then finishes it with the final text;
- killed between the platform accepting the first post and recording it here: the message is
  unknown, so the retry posts another one — the first is left holding partial text (the one
  window, as for split parts), and the final reply still arrives once, in the second;
- killed during the outbox's delivery: the row is retried, re-claims the message and edits it
  again to the same text.

A recorded message the user deleted (or that can no longer be edited) makes the delivery post
the part as usual. The placement is only a courtesy: if Redis loses it, the final reply is sent
as a new message and the streamed one keeps its partial text — a stale preview, never a lost or
doubled reply, which is why the outbox, not this record, stays the truth.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from shared.pipeline.outbox import OutboxRow
from workers.delivery.progress import KEEP_SECONDS, namespace


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a turn's streamed message is."""

    chat_id: str
    thread_id: str | None
    message_id: str

    def fits(self, row: OutboxRow) -> bool:
        return self.chat_id == row.chat_id and (self.thread_id or None) == (row.thread_id or None)


class MessageGone(Exception):
    """The streamed message can no longer be edited (deleted, too old): post instead."""


class LiveMessages(Protocol):
    def placed(self, turn_id: int) -> Placement | None: ...

    def place(self, turn_id: int, placement: Placement) -> None: ...

    def claim(self, turn_id: int, row_id: int) -> bool:
        """Whether outbox row `row_id` owns the turn's message (the first row to ask does)."""
        ...

    def claimed(self, turn_id: int) -> bool:
        """Whether the outbox has taken the message over (the streamer stops editing it)."""
        ...


def claim_for(live: LiveMessages, row: OutboxRow) -> str | None:
    """The streamed message `row`'s first part should finish, if there is one for it.

    The turn is claimed even when nothing was placed yet, so a streamer still running (a worker
    paused past its lease while another finished the turn) posts nothing after this."""
    if row.turn_id is None or not live.claim(row.turn_id, row.id):
        return None
    placement = live.placed(row.turn_id)
    return placement.message_id if placement is not None and placement.fits(row) else None


def finish_live(
    live: LiveMessages | None, row: OutboxRow, text: str, edit: Callable[[str, str], None]
) -> str | None:
    """Deliver `row`'s first part (`text`) by editing its turn's streamed message with
    `edit(message_id, text)`; the message id, or None when the part must be posted instead."""
    if live is None:
        return None
    message_id = claim_for(live, row)
    if message_id is None:
        return None
    try:
        edit(message_id, text)
    except MessageGone:
        return None
    return message_id


def preview_row(
    platform: str, turn_id: int, chat_id: str, thread_id: str | None, reply_to: str | None
) -> OutboxRow:
    """An outbox-shaped row for the streamed message (never stored), so the senders' own post
    code places it (topic, thread, reply-to) as they would the reply."""
    return OutboxRow(
        id=0,
        lane="",
        platform=platform,
        chat_id=chat_id,
        text="",
        status="live",
        attempts=0,
        created_at=0.0,
        turn_id=turn_id,
        thread_id=thread_id,
        reply_to=reply_to,
    )


class RedisLiveMessages:
    """One hash per turn: the placement, and the outbox row that claimed it (HSETNX)."""

    def __init__(self, client: Any, database_url: str, platform: str) -> None:
        self._client = client
        self._prefix = f"hermes:livemsg:{namespace(database_url)}:{platform}:"

    def placed(self, turn_id: int) -> Placement | None:
        raw = self._client.hget(self._prefix + str(turn_id), "at")
        if raw is None:
            return None
        data = json.loads(raw)
        return Placement(str(data["chat"]), data.get("thread"), str(data["message"]))

    def place(self, turn_id: int, placement: Placement) -> None:
        key = self._prefix + str(turn_id)
        value = {
            "chat": placement.chat_id,
            "thread": placement.thread_id,
            "message": placement.message_id,
        }
        pipe = self._client.pipeline(transaction=True)
        pipe.hset(key, "at", json.dumps(value))
        pipe.expire(key, KEEP_SECONDS)
        pipe.execute()

    def claim(self, turn_id: int, row_id: int) -> bool:
        key = self._prefix + str(turn_id)
        pipe = self._client.pipeline(transaction=True)
        pipe.hsetnx(key, "row", str(row_id))
        pipe.hget(key, "row")
        _, owner = pipe.execute()
        owner = owner.decode() if isinstance(owner, bytes) else owner
        return bool(owner == str(row_id))

    def claimed(self, turn_id: int) -> bool:
        return bool(self._client.hexists(self._prefix + str(turn_id), "row"))


class LocalLiveMessages:
    """The cheap twin (one process): the same contract, in memory."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._placed: dict[int, Placement] = {}
        self._owner: dict[int, int] = {}

    def placed(self, turn_id: int) -> Placement | None:
        with self._lock:
            return self._placed.get(turn_id)

    def place(self, turn_id: int, placement: Placement) -> None:
        with self._lock:
            self._placed[turn_id] = placement

    def claim(self, turn_id: int, row_id: int) -> bool:
        with self._lock:
            return self._owner.setdefault(turn_id, row_id) == row_id

    def claimed(self, turn_id: int) -> bool:
        with self._lock:
            return turn_id in self._owner
