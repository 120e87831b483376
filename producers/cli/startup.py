"""What a `hermes` chat does as it starts, besides chatting: say once what needs the operator's
hand (a platform SDK that does not import).
"""

from __future__ import annotations

from collections.abc import Callable

from shared.sdks import configured_platforms, sdk_problems
from shared.settings import Settings

Say = Callable[[str], None]


def sdk_notice(settings: Settings, say: Say) -> None:
    """A configured platform whose SDK does not import: the terminal still works, say why the
    platform does not (`hermes up`, `hermes worker` and `hermes gateway` refuse to start)."""
    for line in sdk_problems(configured_platforms(settings)):
        say(f"{line} Terminal chats work without it.")


def on_chat_start(settings: Settings, say: Say) -> None:
    """After the chat's stack is up: the notices."""
    sdk_notice(settings, say)
