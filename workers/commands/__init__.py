"""Slash commands, run by the worker in the session's place in line, so every platform has them.

Each module contributes a HANDLERS mapping; adding a command touches one module and the
merge below.
"""

from __future__ import annotations

from shared.commands import Command
from shared.pipeline import inbox, outbox, routes
from workers.commands import agent, platform, session
from workers.commands.base import Handler, answer_rows
from workers.flush import deliver_now
from workers.renewer import Held
from workers.runtime import Runtime

HANDLERS: dict[str, Handler] = {**session.HANDLERS, **platform.HANDLERS, **agent.HANDLERS}


def unknown_reply(name: str) -> str:
    return f"Unknown command /{name}. Send /help for the list."


def run_command(
    rt: Runtime, held: Held, turn: inbox.TurnRow, session_id: str, command: Command
) -> None:
    """Answer a command turn; the answer and the turn's status commit together, fenced."""
    now = rt.clock()
    with rt.store.write() as conn:
        routes.check_route(conn, held.lease, now, rt.lease_ttl)
        handler = HANDLERS.get(command.name)
        if handler is None:
            reply = unknown_reply(command.name)
        else:
            reply = handler(conn, rt, turn, session_id, command.args)
        answer_rows(conn, turn, session_id, reply, now)
    deliver_now(rt, outbox.lane_for(turn.platform, turn.chat_id))
