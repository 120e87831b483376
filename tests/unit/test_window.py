"""The model's context: token estimates, the window that fits the budget, tool-call coherence."""

from __future__ import annotations

import json

from shared.model import MessageRecord
from workers.agent.window import build_window, coherent, estimate_tokens, message_tokens


def msg(n: int, role: str, content: str | None = "x" * 40, **extra: object) -> MessageRecord:
    return MessageRecord(n, "s", role, content, float(n), **extra)  # type: ignore[arg-type]


def test_estimates_err_large_for_unspaced_scripts() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd" * 10) == 10
    assert estimate_tokens("部署到生产环境") == 7  # a token a character
    assert message_tokens(msg(1, "user", "abcd")) == 1 + 4
    assert message_tokens(msg(1, "assistant", "abcd", token_count=50)) == 54  # usage wins


def test_window_keeps_the_newest_messages_that_fit_starting_at_a_user_message() -> None:
    history = [msg(i, "user" if i % 2 == 0 else "assistant") for i in range(10)]  # 14 tokens each
    window = build_window(history, available=50)
    assert [m["role"] for m in window.messages] == ["user", "assistant"]
    assert window.dropped == 8 and window.tokens == 28
    assert window.history_tokens == 140
    whole = build_window(history, available=10_000)
    assert len(whole.messages) == 10 and whole.dropped == 0


def test_summaries_go_to_the_system_prompt_not_the_window() -> None:
    history = [msg(0, "system", "Summary: we did X"), msg(1, "user"), msg(2, "assistant")]
    window = build_window(history, available=10_000)
    assert window.summaries == ["Summary: we did X"]
    assert [m["role"] for m in window.messages] == ["user", "assistant"]


def _call(n: int, *ids: str) -> MessageRecord:
    calls = json.dumps(
        [{"id": i, "type": "function", "function": {"name": "t", "arguments": "{}"}} for i in ids]
    )
    return msg(n, "assistant", None, tool_calls=calls)


def test_tool_calls_travel_with_all_their_results() -> None:
    history = [
        msg(0, "user"),
        _call(1, "a", "b"),
        msg(2, "tool", "ra", tool_call_id="a"),
        msg(3, "tool", "rb", tool_call_id="b"),
        msg(4, "assistant", "done"),
        msg(5, "user"),
        _call(6, "c"),  # a stopped turn: the call never got its result
        msg(7, "user", "next"),
    ]
    roles = [m["role"] for m in build_window(history, available=10_000).messages]
    assert roles == ["user", "assistant", "tool", "tool", "assistant", "user", "user"]
    orphan = coherent(
        [{"role": "tool", "tool_call_id": "z", "content": "r"}, {"role": "user", "content": "q"}]
    )
    assert orphan == [{"role": "user", "content": "q"}]
