"""What a `hermes` chat does as it starts, besides chatting: say once what needs the operator's
hand (a platform SDK that does not import, transcripts from an older Hermes) and ask a worker
for the retention prune when it is due. Nothing here makes the chat wait for that work.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from celery import Celery

from producers.maintenance import request_prune_in_background
from shared.sdks import configured_platforms, sdk_problems
from shared.settings import Settings
from shared.store import Store

Say = Callable[[str], None]


def sdk_notice(settings: Settings, say: Say) -> None:
    """A configured platform whose SDK does not import: the terminal still works, say why the
    platform does not (`hermes up`, `hermes worker` and `hermes gateway` refuse to start)."""
    for line in sdk_problems(configured_platforms(settings)):
        say(f"{line} Terminal chats work without it.")


def on_chat_start(settings: Settings, store: Store, producer: Celery, say: Say) -> threading.Thread:
    """After the chat's stack is up: the prune request (on its own thread, returned) and the
    notices."""
    request = request_prune_in_background(settings, store, producer)
    sdk_notice(settings, say)
    return request
