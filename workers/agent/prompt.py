"""The system prompt: the configured instructions, the tools' paragraphs, what is remembered
about the user, and the summary a compressed conversation continues from."""

from __future__ import annotations

from collections.abc import Sequence

from shared.store.memory import Note


def system_prompt(
    base: str,
    tool_paragraphs: Sequence[str],
    notes: Sequence[Note],
    summaries: Sequence[str],
) -> str:
    parts = [base.strip(), *(p.strip() for p in tool_paragraphs)]
    if notes:
        listed = "\n".join(f"- [{note.id}] {note.content}" for note in notes)
        heading = "What you remember about this user (memory notes, ids in brackets):"
        parts.append(f"{heading}\n{listed}")
    for summary in summaries:
        parts.append(
            "This conversation continues an earlier one that was compressed; its summary:\n"
            + summary.strip()
        )
    return "\n\n".join(part for part in parts if part)


def base_prompt(base: str, tool_paragraphs: Sequence[str]) -> str:
    """The part that does not change from turn to turn (the session's snapshot)."""
    return system_prompt(base, tool_paragraphs, (), ())
