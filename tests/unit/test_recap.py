"""The resume recap's rules: what is shown, how much of it, and what is hidden."""

from __future__ import annotations

import json

from shared.model import MessageRecord, SessionRecord
from shared.recap import build_recap, minimal_line


def msg(
    n: int, role: str, content: str | None = None, tools: list[str] | None = None
) -> MessageRecord:
    calls = (
        json.dumps(
            [
                {"id": f"c{i}", "type": "function", "function": {"name": t}}
                for i, t in enumerate(tools)
            ]
        )
        if tools
        else None
    )
    return MessageRecord(n, "s", role, content, float(n), tool_calls=calls)


def test_user_and_assistant_text_are_cut_and_the_last_reply_is_whole() -> None:
    long_user = "u" * 400
    long_reply = "a" * 500
    lines = "\n".join(f"line {i}" for i in range(6))
    recap = build_recap(
        [
            msg(1, "user", long_user),
            msg(2, "assistant", long_reply),
            msg(3, "user", "short"),
            msg(4, "assistant", lines),
            msg(5, "user", "last question"),
            msg(6, "assistant", long_reply),
        ]
    )
    kinds = [line.kind for line in recap.lines]
    assert kinds == ["user", "assistant", "user", "assistant", "user", "assistant"]
    first_user, first_reply, _, multi, _, last = recap.lines
    assert first_user.text == "u" * 300 + "…" and first_user.cut
    assert first_reply.text == "a" * 200 + "…" and first_reply.cut
    assert multi.text == "line 0\nline 1\nline 2…" and multi.cut
    assert last.text == long_reply and not last.cut
    assert (recap.earlier, recap.total) == (0, 6)


def test_tool_calls_collapse_and_system_tool_reasoning_are_hidden() -> None:
    recap = build_recap(
        [
            msg(1, "system", "Summary of the conversation so far"),
            msg(2, "user", "search the web"),
            msg(3, "assistant", None, tools=["terminal"]),
            msg(4, "tool", '{"result": 1}'),
            msg(5, "assistant", None, tools=["web_search", "terminal"]),
            msg(6, "tool", '{"result": 2}'),
            msg(7, "tool", '{"result": 3}'),
            msg(8, "reasoning", "thinking hard"),
            msg(9, "assistant", "<think>private</think>Here is what I found."),
        ]
    )
    assert [(line.kind, line.text) for line in recap.lines] == [
        ("user", "search the web"),
        ("tools", "[3 tool calls: terminal, web_search]"),
        ("assistant", "Here is what I found."),
    ]


def test_only_the_last_ten_exchanges_with_a_count_of_earlier_messages() -> None:
    transcript = []
    for n in range(14):
        transcript.append(msg(2 * n, "user", f"q{n}"))
        transcript.append(msg(2 * n + 1, "assistant", f"a{n}"))
    recap = build_recap(transcript)
    assert recap.lines[0].text == "q4"
    assert len([line for line in recap.lines if line.kind == "user"]) == 10
    assert (recap.earlier, recap.total) == (8, 28)


def test_one_tool_call_is_singular_and_an_empty_session_is_empty() -> None:
    recap = build_recap([msg(1, "user", "run it"), msg(2, "assistant", "ok", tools=["terminal"])])
    assert [line.text for line in recap.lines] == ["run it", "ok", "[1 tool call: terminal]"]
    assert build_recap([]).empty and build_recap([msg(1, "system", "x")]).empty


def test_minimal_line() -> None:
    session = SessionRecord("20260101_120000_abc123", "cli", 0.0, 0.0, title="my project")
    assert (
        minimal_line(session, 12)
        == 'Resumed session 20260101_120000_abc123 "my project" — 12 messages.'
    )


def _long_session(count: int) -> list[MessageRecord]:
    return [msg(n, "user" if n % 2 else "assistant", f"message {n}") for n in range(1, count + 1)]


def test_a_transcript_cut_to_its_newest_part_counts_the_whole_session() -> None:
    newest = _long_session(600)[-400:]  # what the terminal fetches of a 600-message session
    recap = build_recap(newest, session_messages=600)
    assert (recap.earlier, recap.total) == (580, 600)  # 10 exchanges shown, the rest earlier
    assert recap.lines[0].text == "message 581"
    whole = build_recap(_long_session(600))
    assert (whole.earlier, whole.total) == (recap.earlier, recap.total)
    assert build_recap(newest).total == 400  # without the session's count: what was given


def test_the_resume_panel_and_minimal_line_show_the_session_counts() -> None:
    from rich.console import Console

    from producers.cli.recap_view import render_recap

    session = SessionRecord("s", "cli", 0.0, 0.0, message_count=600)
    newest = _long_session(600)[-400:]
    console = Console(record=True, width=120)
    render_recap(console, session, newest, "full")
    render_recap(console, session, newest, "minimal")
    shown = console.export_text()
    assert "... 580 earlier messages ..." in shown and "600 messages" in shown
    assert "Resumed session s — 600 messages." in shown
