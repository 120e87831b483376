"""The shape of a slash command handler."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection

from shared.store.inbox import TurnRow
from workers.runtime import Runtime

# (connection inside the fenced write, runtime, the command's turn, session id, args) → reply.
# A handler runs inside the turn's outcome transaction: whatever it writes commits with it.
Handler = Callable[[Connection, Runtime, TurnRow, str, str], str]
