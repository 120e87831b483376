"""What a `hermes` chat does as it starts, besides chatting: say what needs the operator's hand
(a platform SDK that does not import; transcripts from an older Hermes, once) and ask a worker
for the retention prune when it is due. Nothing here makes the chat wait for that work.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from celery import Celery

from producers.maintenance import request_prune_in_background
from shared.db import Store, meta
from shared.legacy import FOLDER
from shared.legacy_import import NOTICE_KEY, pending_transcripts
from shared.sdks import SENDER, configured_platforms, sdk_problems
from shared.settings import Settings
from shared.wording import plural

Say = Callable[[str], None]


def sdk_notice(settings: Settings, say: Say) -> None:
    """A configured platform whose SDK does not import: the terminal still works, say why the
    platform does not (`hermes up`, `hermes worker` and `hermes gateway` refuse to start)."""
    for line in sdk_problems(configured_platforms(settings), [SENDER]):
        say(f"{line} Terminal chats work without it.")


def legacy_notice(settings: Settings, store: Store, say: Say) -> None:
    """Transcripts from an older Hermes that are not in state.db yet: say so, and how to
    import them — once per HERMES_HOME (again only when a newer one turns up), since an
    operator who chose not to import them does not want to read it at every start."""
    directory = settings.home / FOLDER
    try:
        pending = pending_transcripts(store, directory)
    except OSError:
        return  # an unreadable folder: `hermes sessions import-legacy` will say why
    if not pending:
        return
    newest = max(pending)
    with store.read() as conn:
        seen = meta.get_meta(conn, NOTICE_KEY)
    if seen is not None and newest <= seen:
        return
    with store.write() as conn:
        meta.set_meta(conn, NOTICE_KEY, newest)
    say(
        f"{directory} holds {plural(len(pending), 'transcript')} from an older Hermes that "
        "state.db does not have yet: `hermes sessions import-legacy` imports them (and says "
        "which files are then safe to delete). This note is shown once."
    )


def on_chat_start(settings: Settings, store: Store, producer: Celery, say: Say) -> threading.Thread:
    """After the chat's stack is up: the prune request (on its own thread, returned) and the
    notices."""
    request = request_prune_in_background(settings, store, producer)
    sdk_notice(settings, say)
    legacy_notice(settings, store, say)
    return request
