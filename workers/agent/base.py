"""What the drain gives the agent (history + turn) and what it gets back (new messages)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from shared.model import MessageRecord, SessionRecord
from shared.pipeline.inbox import TurnRow
from shared.store.memory import MemoryOp
from shared.usage import ModelCall
from workers.live import Live, NoLive


@dataclass(frozen=True, slots=True)
class AgentRequest:
    session: SessionRecord
    history: list[MessageRecord]
    turn: TurnRow
    # True once the user asked to /stop or the lease was lost: stop at the next model step.
    should_stop: Callable[[], bool] = lambda: False
    # The turn's live view (the reply as it is written, tool rounds); best effort.
    live: Live = field(default_factory=NoLive)


@dataclass(frozen=True, slots=True)
class NewMessage:
    role: str
    content: str | None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    token_count: int | None = None


@dataclass(frozen=True, slots=True)
class AgentReply:
    messages: list[NewMessage]  # what follows the user's message in the transcript
    replies: list[str]  # what the user is sent, in order
    input_tokens: int = 0
    output_tokens: int = 0
    user_token_count: int | None = None
    stopped: bool = False
    # Snapshot for the session row: model, model_config (JSON), system_prompt.
    session_updates: dict[str, Any] = field(default_factory=dict)
    # The model stayed unreachable (or refused the request): `replies` holds the apology, the
    # user's message is kept, the turn is marked failed and not retried.
    failed: str | None = None
    # Appended to the user's message in the transcript: what the turn's attachments became
    # (descriptions, transcripts, document text, saved paths) — never their bytes.
    user_extra: str | None = None
    # The memory tool's saves and deletions, applied in the turn's fenced write.
    memory_ops: list[MemoryOp] = field(default_factory=list)
    # The context is near the model's budget: summarise into a continuation after this turn.
    compress: bool = False
    # Every model call the turn made (replies, tool rounds, image descriptions, transcripts),
    # for the usage ledger; written with the turn's outcome.
    calls: list[ModelCall] = field(default_factory=list)


class Agent(Protocol):
    def respond(self, request: AgentRequest) -> AgentReply: ...
