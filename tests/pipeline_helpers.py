"""Building blocks for pipeline tests: a runtime on a real store with twin ports."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import select

from shared.db import Store
from shared.db.schema import routes
from shared.ports import RecordingWaker
from shared.settings import Settings
from shared.store import messages
from shared.turns import InboundTurn
from workers.agent.base import AgentReply, AgentRequest, NewMessage
from workers.agent.offline import OfflineAgent
from workers.delivery.base import MemorySender
from workers.delivery.registry import SenderRegistry
from workers.renewer import Renewer
from workers.runtime import Runtime


def turn(
    n: int, chat: str = "c1", *, platform: str = "cli", text: str | None = None, **extra: object
) -> InboundTurn:
    """Turn number `n` of a chat; keyword arguments override any InboundTurn field."""
    values: dict[str, object] = {
        "platform": platform,
        "chat_id": chat,
        "chat_type": "dm",
        "event_id": f"{chat}-{n}",
        "text": text if text is not None else f"message {n}",
        "user_id": "u1",
    }
    values.update(extra)
    return InboundTurn(**values)  # type: ignore[arg-type]


@dataclass
class ScriptedAgent:
    """An Agent port twin: replies by a function of the request, can fail on demand."""

    reply: Callable[[AgentRequest], str] = lambda r: f"reply to {r.turn.text}"
    fail_on: frozenset[str] = frozenset()
    calls: list[str] = field(default_factory=list)

    def respond(self, request: AgentRequest) -> AgentReply:
        self.calls.append(request.turn.text)
        if request.turn.text in self.fail_on:
            raise RuntimeError("model exploded")
        text = self.reply(request)
        return AgentReply(messages=[NewMessage("assistant", text)], replies=[text])


# Every renewer make_runtime builds, closed after each test (conftest's `_renewers_closed`):
# a renewer's thread otherwise outlives its test and its store.
MADE_RENEWERS: list[Renewer] = []


def close_renewers() -> None:
    while MADE_RENEWERS:
        MADE_RENEWERS.pop().close()


def make_runtime(
    settings: Settings,
    store: Store,
    agent: object | None = None,
    clock: Callable[[], float] = time.time,
) -> tuple[Runtime, RecordingWaker]:
    waker = RecordingWaker()
    senders = SenderRegistry([MemorySender("cli"), MemorySender("telegram")])
    renewer = Renewer(store, clock, settings.pipeline.lease_seconds)
    MADE_RENEWERS.append(renewer)
    runtime = Runtime(
        settings=settings,
        store=store,
        agent=agent or OfflineAgent(),  # type: ignore[arg-type]
        senders=senders,
        waker=waker,
        clock=clock,
        renewer=renewer,
    )
    return runtime, waker


def transcript_of(store: Store, key: str) -> list[tuple[str, str]]:
    """(role, content) of the session `key` routes to, in order."""
    with store.read() as conn:
        session_id = conn.execute(
            select(routes.c.session_id).where(routes.c.session_key == key)
        ).scalar_one()
        return [(m.role, m.content or "") for m in messages.transcript(conn, session_id)]
