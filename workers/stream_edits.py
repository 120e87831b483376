"""Progressive replies on Telegram, Slack and Discord (`platforms.<p>.stream_edits`): while a
turn streams, one message is posted as soon as the first words arrive and edited as the reply
grows, from a side thread, at most every `stream_edit_interval` seconds, each edit taking a
token from the fleet's buckets (none free: that edit waits for the limiter's answer and then
carries the newer text). The committed reply then finishes the message through the outbox
(workers/delivery/live_message.py says why a worker dying anywhere sends nothing twice).

The preview is the reply's first part at the platform's limit: that is what the final edit
writes there, and the rest of a long reply follows as new messages. A failure other than a
rate limit stops this turn's edits (the reply still comes through the outbox); edits stop too
once the outbox has claimed the message, so a worker paused past its lease never overwrites
the final text with a stale one.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator

from shared.pipeline.inbox import TurnRow
from shared.platforms import registry
from workers.delivery.base import LiveEditor, RetryLater
from workers.delivery.live_message import LiveMessages, MessageGone, Placement, preview_row
from workers.delivery.split import split_for
from workers.live import Live, live_for
from workers.runtime import Runtime

log = logging.getLogger(__name__)

# Longer than any sender's request timeout (30 s): an edit still in flight when the turn ends
# finishes before the commit, so it can never land on top of the final text.
JOIN_SECONDS = 40.0


class Both:
    """Tells two live views the same thing (the Redis channel and the platform's message)."""

    def __init__(self, first: Live, second: Live) -> None:
        self._views = (first, second)

    def text(self, so_far: str) -> None:
        for view in self._views:
            view.text(so_far)

    def status(self, what: str) -> None:
        for view in self._views:
            view.status(what)

    def flush(self) -> None:
        for view in self._views:
            view.flush()

    def done(self) -> None:
        for view in self._views:
            view.done()


class StreamEditor:
    """One turn's streamed message: the model thread offers text, `run` (a side thread) edits."""

    def __init__(self, sender: LiveEditor, live: LiveMessages, turn: TurnRow) -> None:
        self._sender = sender
        self._live = live
        self._turn = turn
        self._platform = registry.get(turn.platform)
        self._row = preview_row(
            turn.platform, turn.id, turn.chat_id, turn.thread_id, turn.message_id
        )
        self._lock = threading.Lock()
        self._latest = ""
        self._shown = ""
        self._message_id: str | None = None
        self._wake = threading.Event()  # new text (or the end of the turn)
        self._next = 0.0  # monotonic time the next edit may be made
        self.edits = 0  # posts and edits made (tests, logs)

    # --- the Live protocol (the model thread) ---

    def text(self, so_far: str) -> None:
        with self._lock:
            self._latest = so_far
        self._wake.set()

    def status(self, what: str) -> None:
        pass  # tool rounds: the typing indicator says the bot is busy

    def flush(self) -> None:
        pass

    def done(self) -> None:
        pass

    # --- the side thread ---

    def run(self, stop: threading.Event) -> None:
        """Until `stop`: wait for new text, then for the pace, then show it."""
        while not stop.is_set():
            self._wake.wait()
            if stop.wait(max(0.0, self._next - time.monotonic())):
                return
            self._wake.clear()
            if not self.step():
                return

    def stop(self, stop: threading.Event) -> None:
        stop.set()
        self._wake.set()

    def step(self) -> bool:
        """Show the newest text if it changed; False: stop editing for this turn."""
        with self._lock:
            latest = self._latest
        parts = split_for(self._platform, latest)
        preview = parts[0] if parts else ""
        if not preview or preview == self._shown:
            return True
        if self._live.claimed(self._turn.id):
            return False  # the outbox has the message now: the final text is its to write
        try:
            self._show(preview)
        except RetryLater as exc:  # no token free: skip this edit, a later one carries newer text
            self._next = time.monotonic() + max(self._sender.stream_interval, exc.after)
            self._wake.set()  # the text is still unshown: look again then
            return True
        except Exception as exc:  # a courtesy: the reply still comes through the outbox
            log.info("stream edits of turn %s stopped: %s", self._turn.id, exc)
            return False
        self._shown = preview
        self._next = time.monotonic() + self._sender.stream_interval
        self.edits += 1
        return True

    def _show(self, text: str) -> None:
        if self._message_id is None:
            placed = self._live.placed(self._turn.id)  # a previous attempt's (worker killed)
            if placed is not None and placed.fits(self._row):
                self._message_id = placed.message_id
            else:
                message_id = self._sender.post_live(self._row, text)
                self._live.place(
                    self._turn.id,
                    Placement(self._turn.chat_id, self._turn.thread_id, message_id),
                )
                self._message_id = message_id
                return
        try:
            self._sender.edit_live(self._row, self._message_id, text)
        except MessageGone:
            log.info("turn %s's streamed message is gone; edits stop", self._turn.id)
            raise


@contextlib.contextmanager
def streaming(rt: Runtime, turn: TurnRow) -> Iterator[Live]:
    """The turn's live view: its Redis channel, plus its streamed message when the platform
    has stream_edits on; the side thread is stopped and joined before the turn commits."""
    base = live_for(rt.redis, turn.id)
    sender: LiveEditor | None = rt.senders.able(turn.platform, LiveEditor)
    if sender is None or sender.live is None:
        yield base
        return
    editor = StreamEditor(sender, sender.live, turn)
    stop = threading.Event()
    thread = threading.Thread(target=editor.run, args=(stop,), name="hermes-stream", daemon=True)
    thread.start()
    try:
        yield Both(base, editor)
    finally:
        editor.stop(stop)
        thread.join(JOIN_SECONDS)
