"""The built-in offline model: deterministic, no network, and it says what it is."""

from __future__ import annotations

import json
import time

from shared.usage import REPLY, ModelCall
from workers.agent.auxiliary import OfflineAuxiliary
from workers.agent.base import AgentReply, AgentRequest, NewMessage
from workers.agent.media import MediaProcessor
from workers.agent.metering import Meter

PREFIX = "[offline model]"
STEP_SECONDS = 0.05
MODEL_NAME = "offline"


class OfflineAgent:
    """Answers every turn with a fixed, recognisable reply after `latency` seconds."""

    def __init__(self, latency: float = 0.0, media: MediaProcessor | None = None) -> None:
        self.latency = latency
        self.media = media
        self.auxiliary = OfflineAuxiliary()

    def close(self) -> None:
        if self.media is not None:
            self.media.close()

    def respond(self, request: AgentRequest) -> AgentReply:
        started = time.monotonic()
        deadline = started + self.latency
        while (left := deadline - time.monotonic()) > 0:
            if request.should_stop():
                return AgentReply(messages=[], replies=[], stopped=True)
            time.sleep(min(STEP_SECONDS, left))
        note = None
        calls: Meter = []
        if self.media is not None and request.turn.attachments:
            prepared = self.media.prepare(
                request.turn, request.session.id, vision=False, meter=calls
            )
            note = prepared.note
        text = request.turn.text.strip()
        shown = text if len(text) <= 200 else text[:199] + "…"
        reply = (
            f"{PREFIX} I am the offline model (no model endpoint is configured), "
            f"so I can only echo: {shown}"
        )
        if note:
            reply += "\n(Your attachments are noted in the transcript:)\n" + note
        words = max(1, len(text.split()))
        updates = {}
        if request.session.model_config is None:
            updates["model"] = MODEL_NAME
            updates["model_config"] = json.dumps({"model": MODEL_NAME, "offline": True})
        # Its "tokens" are words: estimates, and marked so in the ledger (it costs nothing).
        calls.append(
            ModelCall(
                kind=REPLY,
                model=MODEL_NAME,
                at=time.time(),
                input_tokens=words,
                output_tokens=len(reply.split()),
                latency_ms=(time.monotonic() - started) * 1000,
                estimated=True,
            )
        )
        return AgentReply(
            messages=[NewMessage("assistant", reply, token_count=len(reply.split()))],
            replies=[reply],
            input_tokens=words,
            output_tokens=len(reply.split()),
            user_token_count=words,
            session_updates=updates,
            user_extra=note,
            calls=calls,
        )
