"""The agent on an OpenAI-compatible endpoint: context, the tool-calling loop, failures as replies.

One turn: build the system prompt (instructions, tool paragraphs, memory notes, the summary a
continuation starts from) and the newest window of history that fits the budget, add this
turn (with its attachments), then call the model until it answers without tool calls (at most
`model.max_tool_rounds` rounds of tools; the last round is offered no tools). A model that
stays unreachable after the retries, or refuses the request, becomes a clear reply and a
`failed` turn: the user's message is kept and nothing is retried in a loop.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from shared.db import Store
from shared.live import tool_status
from shared.ports import Clock
from shared.settings import Settings
from shared.store import memory as memory_rows
from shared.usage import REPLY, TOOL_ROUND, ModelCall, ToolUse
from workers.agent.auxiliary import Auxiliary
from workers.agent.base import AgentReply, AgentRequest, NewMessage
from workers.agent.client import (
    ChatClient,
    Completion,
    ImagesRejected,
    ModelRejected,
    ModelUnavailable,
    Stopped,
    model_config,
)
from workers.agent.media import MediaProcessor, TurnMedia
from workers.agent.metering import Meter, model_call
from workers.agent.prompt import base_prompt, system_prompt
from workers.agent.tools.registry import ToolContext, ToolRegistry
from workers.agent.window import (
    MESSAGE_OVERHEAD,
    build_window,
    estimate_tokens,
    estimate_value,
    reserve_for_reply,
)

log = logging.getLogger(__name__)

EMPTY_REPLY = "(The model returned an empty reply.)"


def unreachable_text(model: str, reason: str, attempts: int) -> str:
    return (
        f"Sorry — I can't reach the model ({model}) right now: {reason}, after {attempts} "
        "attempts. Your message is saved; please send it again in a little while."
    )


def refused_text(model: str, reason: str) -> str:
    return (
        f"Sorry — the model endpoint refused this request ({model}: {reason}). Your message "
        "is saved; the model settings (model.base_url, model.api_key, model.name) may need "
        "a look."
    )


@dataclass
class _Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    last_prompt: int = 0
    last_completion: int = 0

    def add(self, call: ModelCall) -> None:
        self.input_tokens += call.input_tokens
        self.output_tokens += call.output_tokens
        self.last_prompt, self.last_completion = call.input_tokens, call.output_tokens


@dataclass
class _Turn:
    """One turn's working state."""

    request: AgentRequest
    chat: list[dict[str, Any]]
    media: TurnMedia
    tools: ToolContext
    full_estimate: int
    window_dropped: int
    new: list[NewMessage] = field(default_factory=list)
    usage: _Usage = field(default_factory=_Usage)
    calls: Meter = field(default_factory=list)


class OpenAIAgent:
    """Answers turns with a chat model; `auxiliary` does titles, summaries and image text."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        chat: ChatClient,
        auxiliary: Auxiliary,
        tools: ToolRegistry,
        media: MediaProcessor,
        clock: Clock = time.time,
    ) -> None:
        self.settings = settings
        self.store = store
        self.chat = chat
        self.auxiliary = auxiliary
        self.tools = tools
        self.media = media
        self.clock = clock
        self._vision = settings.model.vision

    def close(self) -> None:
        self.chat.close()
        self.media.close()
        closer = getattr(self.auxiliary, "close", None)
        if closer is not None:
            closer()

    # --- building the request ---

    def _start(self, request: AgentRequest) -> _Turn:
        turn, session = request.turn, request.session
        owner = memory_rows.owner_for(turn.platform, turn.user_id, turn.chat_id)
        limit = self.settings.agent.memory_notes
        with self.store.read() as conn:
            notes = memory_rows.list_notes(conn, owner, limit) if limit else []
        calls: Meter = []
        media = self.media.prepare(turn, session.id, vision=self._vision, meter=calls)
        user_content = media.content(turn.text)
        model = self.settings.model
        schemas = self.tools.schemas()
        summaries = [m.content for m in request.history if m.role == "system" and m.content]
        system = system_prompt(model_prompt(self.settings), self.tools.prompts(), notes, summaries)
        fixed = (
            estimate_tokens(system)
            + estimate_value(user_content)
            + estimate_value(schemas)
            + 2 * MESSAGE_OVERHEAD
        )
        available = model.context_tokens - reserve_for_reply(
            model.context_tokens, model.max_output_tokens
        )
        window = build_window(request.history, max(0, available - fixed))
        chat = [
            {"role": "system", "content": system},
            *window.messages,
            {"role": "user", "content": user_content},
        ]
        context = ToolContext(self.store, session.id, turn, owner, self.clock)
        estimate = fixed + window.history_tokens
        return _Turn(request, chat, media, context, estimate, window.dropped, calls=calls)

    # --- the loop ---

    def respond(self, request: AgentRequest) -> AgentReply:
        try:
            return self._respond(request)
        finally:
            request.live.done()

    def _respond(self, request: AgentRequest) -> AgentReply:
        state = self._start(request)
        rounds = self.settings.model.max_tool_rounds
        try:
            for round_no in range(rounds + 1):
                offered = self.tools.schemas() if round_no < rounds else None
                completion = self._complete(state, offered)
                if not completion.tool_calls:
                    return self._finish(state, completion)
                self._run_tools(state, completion)
        except Stopped:
            return self._reply(state, [], stopped=True)
        except ModelUnavailable as exc:
            log.error("model %s unreachable: %s", self.chat.model, exc.reason)
            text = unreachable_text(self.chat.model, exc.reason, exc.attempts)
            return self._reply(state, [text], failed=f"model unreachable: {exc.reason}")
        except ModelRejected as exc:
            log.error("model %s refused the request: %s", self.chat.model, exc.reason)
            text = refused_text(self.chat.model, exc.reason)
            return self._reply(state, [text], failed=f"model refused: {exc.reason}")
        raise AssertionError("unreachable: the last round offers no tools")

    def _complete(self, state: _Turn, tools: list[dict[str, Any]] | None) -> Completion:
        should_stop, live = state.request.should_stop, state.request.live
        try:
            completion = self.chat.complete(
                state.chat, tools=tools, should_stop=should_stop, on_text=live.text
            )
        except ImagesRejected as exc:
            log.warning("model %s refused images (%s); describing them", self.chat.model, exc)
            self._vision = False  # this process stops sending images to this model
            self._describe_images(state)
            completion = self.chat.complete(
                state.chat, tools=tools, should_stop=should_stop, on_text=live.text
            )
        live.flush()
        kind = TOOL_ROUND if completion.tool_calls else REPLY
        call = model_call(
            completion, kind=kind, model=self.chat.model, at=self.clock(), sent=state.chat
        )
        state.calls.append(call)
        state.usage.add(call)
        return completion

    def _describe_images(self, state: _Turn) -> None:
        session_id = state.request.session.id
        state.media.items = [
            self.media.described(item, session_id, i, state.calls)
            if item.image is not None
            else item
            for i, item in enumerate(state.media.items)
        ]
        for message in reversed(state.chat):
            if message["role"] == "user":
                message["content"] = state.media.content(state.request.turn.text)
                break

    def _run_tools(self, state: _Turn, completion: Completion) -> None:
        calls = []
        for n, call in enumerate(completion.tool_calls):
            call_id = call.get("id") or f"call_{len(state.new)}_{n}"
            calls.append({**call, "id": call_id})
        said = completion.content or None
        state.chat.append({"role": "assistant", "content": said, "tool_calls": calls})
        state.new.append(
            NewMessage(
                "assistant",
                completion.content or None,
                tool_calls=calls,
                token_count=state.usage.last_completion,
            )
        )
        round_call = state.calls[-1]
        uses: list[ToolUse] = []
        for call in calls:
            if state.request.should_stop():
                raise Stopped
            function = call.get("function") or {}
            name = str(function.get("name") or "")
            state.request.live.status(tool_status(name))
            result, failed = self.tools.run(name, function.get("arguments"), state.tools)
            uses.append(ToolUse(name or "(unnamed)", failed))
            state.calls[-1] = dataclasses.replace(round_call, tools=tuple(uses))
            state.chat.append({"role": "tool", "tool_call_id": call["id"], "content": result})
            state.new.append(
                NewMessage(
                    "tool",
                    result,
                    tool_call_id=call["id"],
                    tool_name=name,
                    token_count=estimate_tokens(result),
                )
            )

    def _finish(self, state: _Turn, completion: Completion) -> AgentReply:
        text = completion.content.strip() or EMPTY_REPLY
        state.new.append(NewMessage("assistant", text, token_count=state.usage.last_completion))
        model = self.settings.model
        threshold = self.settings.agent.compression_threshold * model.context_tokens
        used = state.usage.last_prompt + state.usage.last_completion
        whole = state.full_estimate + estimate_tokens(text)
        # The history given is capped (workers.drain_claim.HISTORY_MESSAGES): a session longer than
        # that has messages the model no longer sees, so they go into a summary too.
        session = state.request.session
        capped = session.message_count > len(state.request.history)
        compress = state.window_dropped > 0 or capped or used >= threshold or whole >= threshold
        if compress:
            log.info(
                "session %s is near its context budget (%s of %s tokens, %s messages); compressing",
                session.id,
                max(used, whole),
                model.context_tokens,
                session.message_count,
            )
        return self._reply(state, [text], compress=compress)

    def _reply(
        self,
        state: _Turn,
        replies: list[str],
        *,
        stopped: bool = False,
        failed: str | None = None,
        compress: bool = False,
    ) -> AgentReply:
        turn = state.request.turn
        note = state.media.note
        stored_user = "\n\n".join(p for p in (turn.text, note) if p)
        return AgentReply(
            messages=state.new,
            replies=replies,
            input_tokens=state.usage.input_tokens,
            output_tokens=state.usage.output_tokens,
            user_token_count=estimate_tokens(stored_user),
            stopped=stopped,
            session_updates=self._snapshot(state),
            failed=failed,
            user_extra=note,
            memory_ops=list(state.tools.memory_ops),
            compress=compress,
            calls=list(state.calls),
        )

    def _snapshot(self, state: _Turn) -> dict[str, Any]:
        session = state.request.session
        model = self.settings.model
        config = model_config(
            self.chat,
            context_tokens=model.context_tokens,
            vision=model.vision,
            max_tool_rounds=model.max_tool_rounds,
            max_output_tokens=model.max_output_tokens,
            tools=self.tools.names(),
        )
        updates: dict[str, Any] = {}
        if session.model != self.chat.model:
            updates["model"] = self.chat.model
        if session.model_config != config:
            updates["model_config"] = config
        if session.system_prompt is None:
            prompt = base_prompt(model_prompt(self.settings), self.tools.prompts())
            updates["system_prompt"] = prompt
        return updates


def model_prompt(settings: Settings) -> str:
    return settings.agent.system_prompt
