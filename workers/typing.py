""" "typing…" in the user's chat while a turn runs: refreshed from a side thread every
`typing_every` seconds of the platform's sender until the turn's outcome is committed.

A courtesy: a failure is logged once and the turn goes on; platforms whose sender cannot
show typing (the terminal, SMS) get nothing.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

from shared.pipeline.inbox import TurnRow
from workers.delivery.base import Typist
from workers.delivery.registry import SenderRegistry

log = logging.getLogger(__name__)


@contextlib.contextmanager
def typing_while(senders: SenderRegistry, turn: TurnRow) -> Iterator[None]:
    sender: Typist | None = senders.able(turn.platform, Typist)
    if sender is None:
        yield
        return
    done = threading.Event()
    keeper = threading.Thread(
        target=_keep_typing, args=(sender, turn, done), name="hermes-typing", daemon=True
    )
    keeper.start()
    try:
        yield
    finally:
        done.set()
        keeper.join(5.0)


def _keep_typing(sender: Typist, turn: TurnRow, done: threading.Event) -> None:
    while not done.is_set():
        try:
            sender.typing(turn.chat_id, turn.thread_id)
        except Exception as exc:  # the reply matters, the indicator does not
            log.info("no typing indicator for %s chat %s: %s", turn.platform, turn.chat_id, exc)
            return
        done.wait(sender.typing_every)
