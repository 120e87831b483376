"""The live view of a turn: the Redis channel a worker publishes a reply's growing text on, and
the shape of what it publishes. Pure: no I/O (the worker publishes, the terminal listens).

Each event carries the whole text so far, not a delta, so a lost or late event costs only a
frame of the view: the next one is complete on its own. The committed messages stay the one
truth; a terminal that saw no stream prints the committed reply as before.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

TEXT = "text"  # the reply as written so far
STATUS = "status"  # a tool round in progress ("searching past sessions…")
DONE = "done"  # the model has finished (the committed reply follows through the outbox)

KINDS = (TEXT, STATUS, DONE)

# What a tool round looks like on the live view; any other tool shows "running <name>…".
TOOL_STATUS = {
    "session_search": "searching past sessions…",
    "memory": "updating memory…",
}


def channel_for(turn_id: int) -> str:
    return f"hermes:live:{turn_id}"


def tool_status(name: str) -> str:
    return TOOL_STATUS.get(name) or f"running {name or 'a tool'}…"


@dataclass(frozen=True, slots=True)
class LiveEvent:
    kind: str
    text: str = ""

    def encode(self) -> str:
        return json.dumps({"kind": self.kind, "text": self.text}, ensure_ascii=False)


def decode(raw: bytes | str) -> LiveEvent | None:
    """An event from the channel, or None for anything that is not one (never raises)."""
    try:
        data = json.loads(raw)
    except (ValueError, TypeError):
        return None
    if not isinstance(data, dict) or data.get("kind") not in KINDS:
        return None
    text = data.get("text")
    return LiveEvent(str(data["kind"]), text if isinstance(text, str) else "")
