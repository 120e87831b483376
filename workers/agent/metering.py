"""Model calls as usage-ledger records: the endpoint's reported tokens, else marked estimates.

A `Meter` is a plain list the calls of one unit of work (a turn, a title, a summary) are
appended to as they finish; whoever commits that work writes them to the ledger
(shared.store.usage) in the same transaction.
"""

from __future__ import annotations

from typing import Any

from shared.platforms import CRON
from shared.store.usage import Where
from shared.usage import ModelCall
from workers.agent.client import Completion
from workers.agent.window import MESSAGE_OVERHEAD, estimate_tokens, estimate_value

Meter = list[ModelCall]


def estimate_prompt(sent: list[dict[str, Any]]) -> int:
    return sum(estimate_value(m.get("content")) + MESSAGE_OVERHEAD for m in sent)


def model_call(
    completion: Completion, *, kind: str, model: str, at: float, sent: list[dict[str, Any]]
) -> ModelCall:
    """The ledger record of one completion; tokens the endpoint did not report are estimated
    from what was sent and received, and the record says so."""
    prompt, output = completion.prompt_tokens, completion.completion_tokens
    estimated = prompt is None or output is None
    if prompt is None:
        prompt = estimate_prompt(sent)
    if output is None:
        output = estimate_tokens(completion.content) + estimate_value(completion.tool_calls)
    return ModelCall(
        kind=kind,
        model=model,
        at=at,
        input_tokens=prompt,
        output_tokens=output,
        latency_ms=completion.latency_ms,
        cached_tokens=completion.cached_tokens,
        reasoning_tokens=completion.reasoning_tokens,
        estimated=estimated,
    )


def where(
    platform: str, session_id: str | None, chat_id: str | None, turn_id: int | None = None
) -> Where:
    """Whose calls: a cron job's turns carry the job (its chat is the job id)."""
    job = chat_id if platform == CRON else None
    return Where(platform=platform, session_id=session_id, turn_id=turn_id, cron_job=job)
