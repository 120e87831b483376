"""The terminal's side of a chat: one route per terminal, turns in through the inbox, replies
read back from the outbox.

Scheme: a terminal talks as platform `cli`, chat type `dm`, user `local`, with chat id = the
id of the session it is attached to — a fresh 6-hex CLI id for a new chat (the drain creates
the session under that very id on the first turn), or the resumed session's own chat id. The
route `agent:main:cli:dm:<chat id>` maps it to the current session; resuming binds that route
to the resumed session (the newest of its compression lineage), so `/new`, `/compress` and
`/resume` inside the chat move the route and the terminal follows it.

Attachments (`-a FILE`, `/attach PATH`) travel as bytes, not paths: `send` reads each file here
and stores it in the database's blob table (shared.store.media) before the turn is recorded,
and the turn names the blob (`blob:<sha256>`), so a worker on any host reads it.

A reply is waited for by reading the turn's status and outbox rows; when the broker is Redis
the terminal also subscribes to `hermes:cli:<chat id>`, which the worker's cli sender
publishes on, to wake at once instead of at the next poll.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from producers.broker import broker_redis
from producers.intake import accept, key_for
from shared import live, media_objects
from shared.db import Store
from shared.ids import new_session_id
from shared.live import LiveEvent, decode
from shared.media_objects import MediaObjects
from shared.model import MessageRecord, SessionRecord
from shared.pipeline import inbox, outbox, route_sessions, routes
from shared.platforms import CLI, DM
from shared.ports import Waker
from shared.settings import Settings
from shared.store import lineage, messages
from shared.store import media as blobs
from shared.store import sessions as session_rows
from shared.store.memory import LOCAL_USER
from shared.store.resume import latest_session, leave_terminal, lineage_head
from shared.store.sessions import reopen_session
from shared.store.visibility import Viewer
from shared.turns import Attachment, InboundTurn

CHANNEL = "hermes:cli:{chat_id}"  # workers.delivery.cli.channel_for publishes here
POLL_SECONDS = 0.25
LIVE_PREFIX = live.channel_for(0).removesuffix("0")
REWAKE_SECONDS = 5.0  # no beat runs beside a terminal's own stack: re-send a lost wake-up
FINISHED = {inbox.DONE, inbox.FAILED, inbox.CANCELLED, inbox.DEAD}
RECAP_MESSAGES = 400
OWNER = Viewer(CLI, LOCAL_USER)  # the person at this terminal owns the home: every session


class NothingToResume(LookupError):
    """`hermes -c` with no earlier terminal session."""


@dataclass(frozen=True, slots=True)
class Outcome:
    status: str
    replies: list[str]
    waited: float


@dataclass
class Subscription:
    """A Redis pub/sub on one terminal's channel, with the client it owns."""

    client: Any
    pubsub: Any

    def wait(self, timeout: float, on_live: Callable[[LiveEvent], None] | None = None) -> None:
        """Return when a reply ping arrives or `timeout` passes; live-view events met meanwhile
        go to `on_live`."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            message = self.pubsub.get_message(timeout=left)
            if message is None:  # a subscribe confirmation, or the time is up
                continue
            channel = message.get("channel")
            name = channel.decode() if isinstance(channel, bytes) else str(channel)
            if not name.startswith(LIVE_PREFIX):
                return
            event = decode(message.get("data", b""))
            if event is not None and on_live is not None:
                on_live(event)

    def follow(self, turn_id: int) -> None:
        self.pubsub.subscribe(live.channel_for(turn_id))

    def unfollow(self, turn_id: int) -> None:
        self.pubsub.unsubscribe(live.channel_for(turn_id))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.pubsub.close()
        with contextlib.suppress(Exception):
            self.client.close()


def subscriber(settings: Settings, chat_id: str) -> Subscription | None:
    """A Redis pub/sub on the terminal's channel, or None (the terminal then only polls)."""
    try:
        client = broker_redis(settings)
        if client is None:
            return None
        subscription = Subscription(client, client.pubsub(ignore_subscribe_messages=True))
        try:
            subscription.pubsub.subscribe(CHANNEL.format(chat_id=chat_id))
        except Exception:
            subscription.close()
            raise
        return subscription
    except Exception:  # no broker yet, or not Redis: polling alone is slower, not wrong
        return None


class TerminalChat:
    """One terminal's conversation: which session it is on, sending turns, waiting for replies."""

    def __init__(self, settings: Settings, store: Store, waker: Waker, clock: Callable[[], float]):
        self.settings = settings
        self.store = store
        self.waker = waker
        self.clock = clock
        self.chat_id = ""
        self.key = ""
        self._pubsub: Subscription | None = None
        self._objects: MediaObjects | None = None  # built at the first upload (media.url)

    # --- which session ---

    def start_fresh(self) -> None:
        now = datetime.fromtimestamp(self.clock(), UTC)
        with self.store.read() as conn:
            for _ in range(5):
                chat_id = new_session_id(now, gateway=False)
                if session_rows.get_session(conn, chat_id) is None:
                    break
        self._use(chat_id)

    def find(self, *, resume: str | None = None, continue_name: str | None = None) -> SessionRecord:
        """The session `-r REF` or `-c [REF]` names (an id, a unique id prefix or a title; the
        latest terminal session for a bare `-c`), at the head of its compression lineage."""
        with self.store.read() as conn:
            ref = resume if resume is not None else continue_name
            if ref:
                found = lineage.resolve(conn, ref, OWNER)
            else:
                latest = latest_session(conn, CLI)
                if latest is None:
                    raise NothingToResume("No earlier terminal session to continue.")
                found = latest
            return lineage_head(conn, found)

    def attach(self, session: SessionRecord) -> SessionRecord:
        """Bind this terminal's route to `session` (reopening it if /new or /reset ended it)."""
        chat_id = session.chat_id if session.source == CLI and session.chat_id else session.id
        self._use(chat_id)
        with self.store.write() as conn:
            reopen_session(conn, session.id)
            place = routes.Place(CLI, chat_id, DM, user_id=LOCAL_USER)
            route_sessions.bind_route(conn, self.key, session.id, place, self.clock())
            return session_rows.require_session(conn, session.id)

    def leave(self) -> str:
        """This terminal is done with its session: it ends (`cli_exit`), or goes if it holds
        nothing. Returns what happened ("ended", "dropped" or "")."""
        if not self.key:
            return ""
        with self.store.write() as conn:
            return leave_terminal(conn, self.key, self.clock())

    def _use(self, chat_id: str) -> None:
        self.chat_id = chat_id
        self.key = key_for(self._turn("probe", ""), self.settings).key

    def session_id(self) -> str | None:
        with self.store.read() as conn:
            return route_sessions.route_session_id(conn, self.key)

    def session(self) -> SessionRecord | None:
        session_id = self.session_id()
        if session_id is None:
            return None
        with self.store.read() as conn:
            return session_rows.get_session(conn, session_id)

    def transcript(self, session_id: str) -> list[MessageRecord]:
        with self.store.read() as conn:
            return messages.last_messages(conn, session_id, RECAP_MESSAGES)

    # --- turns ---

    def _turn(self, event: str, text: str, attachments: tuple[Attachment, ...] = ()) -> InboundTurn:
        return InboundTurn(
            platform=CLI,
            chat_id=self.chat_id,
            chat_type=DM,
            event_id=event,
            text=text,
            user_id=LOCAL_USER,
            attachments=attachments,
        )

    def objects(self) -> MediaObjects | None:
        """The object store `media.url` names (None: bytes in the database)."""
        if self._objects is None:
            self._objects = media_objects.from_settings(self.settings.media)
        return self._objects

    def upload(self, attachment: Attachment) -> Attachment:
        """A local file's bytes into the blob table (and the object store when `media.url` is
        set); the attachment as the turn names it (no path). MediaRefused over
        `agent.max_attachment_mb`, OSError when unreadable, MediaStorageError when the object
        store fails (nothing written then)."""
        if not attachment.path:
            return attachment
        cap = blobs.max_bytes_for(self.settings.agent.max_attachment_mb)
        path = Path(attachment.path)
        name = attachment.name or path.name
        blobs.check_size(path.stat().st_size, cap, name)
        data = path.read_bytes()
        with self.store.write() as conn:
            sha = blobs.put(
                conn, data, attachment.mime_type, max_bytes=cap, name=name, objects=self.objects()
            )
        return replace(attachment, path=None, url=blobs.ref_of(sha), size=len(data), name=name)

    def send(self, text: str, attachments: tuple[Attachment, ...] = ()) -> int:
        """Record a turn (the worker is woken); returns its id. Attached files are uploaded
        first (see `upload`); a refused one raises before anything is recorded."""
        attachments = tuple(self.upload(attachment) for attachment in attachments)
        if self._pubsub is None:
            self._pubsub = subscriber(self.settings, self.chat_id)
        event = f"{self.chat_id}:{uuid.uuid4().hex}"
        turn = self._turn(event, text, attachments)
        accepted = accept(self.store, self.waker, turn, settings=self.settings, clock=self.clock)
        if self._pubsub is not None:
            try:  # the reply as it is written; a missed start only costs its first frames
                self._pubsub.follow(accepted.turn_id)
            except Exception:
                self.close()
        return accepted.turn_id

    def status(self, turn_id: int) -> str:
        with self.store.read() as conn:
            row = inbox.get_turn(conn, turn_id)
        return row.status if row is not None else inbox.DEAD

    def wait(
        self,
        turn_id: int,
        *,
        timeout: float | None = None,
        tick: Callable[[float, str], None] = lambda waited, status: None,
        on_live: Callable[[LiveEvent], None] | None = None,
    ) -> Outcome | None:
        """Wait for the turn to finish; its replies (None when `timeout` passes first). The
        reply as it is written goes to `on_live` meanwhile (when the broker is Redis)."""
        started = time.monotonic()
        last_wake = started
        while True:
            with self.store.read() as conn:
                row = inbox.get_turn(conn, turn_id)
                rows = outbox.for_turn(conn, turn_id)
            waited = time.monotonic() - started
            status = row.status if row is not None else inbox.DEAD
            if status in FINISHED:
                self._unfollow(turn_id)
                return Outcome(status, [r.text for r in rows], waited)
            if timeout is not None and waited >= timeout:
                return None
            tick(waited, status)
            if time.monotonic() - last_wake >= REWAKE_SECONDS:
                self.waker.drain(self.key)  # harmless if the first one arrived
                last_wake = time.monotonic()
            self._pause(on_live)

    def _unfollow(self, turn_id: int) -> None:
        if self._pubsub is not None:
            try:
                self._pubsub.unfollow(turn_id)
            except Exception:
                self.close()

    def _pause(self, on_live: Callable[[LiveEvent], None] | None = None) -> None:
        if self._pubsub is not None:
            try:
                self._pubsub.wait(POLL_SECONDS, on_live)
                return
            except Exception:  # the broker went away: poll from now on
                self.close()
        time.sleep(POLL_SECONDS)

    def close(self) -> None:
        if self._pubsub is not None:
            self._pubsub.close()
            self._pubsub = None
