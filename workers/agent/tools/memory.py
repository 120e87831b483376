"""The `memory` tool: save, list and forget durable notes about the user (shown in later sessions).

Saves and deletions are collected on the turn and written with its outcome (fenced); `list`
shows the stored notes with this turn's pending changes applied.
"""

from __future__ import annotations

from typing import Any

from shared.store import memory as notes
from shared.store.memory import MemoryOp
from workers.agent.tools.registry import Tool, ToolContext

NAME = "memory"
LIST_LIMIT = 200

PROMPT = (
    "You have a durable memory about this user with the memory tool. Save short facts worth "
    "knowing in later conversations (preferences, names, ongoing projects, how they like "
    "answers), one fact per note; do not save secrets or passing details. Forget a note that "
    "is wrong or that the user asks you to forget. Notes you already have are listed below."
)

SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": NAME,
        "description": "Durable notes about the user, kept across conversations. "
        "action=save with content; action=list; action=forget with the note's id.",
        "parameters": {
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["save", "list", "forget"]},
                "content": {"type": "string", "description": "The note to save (one fact)."},
                "id": {"type": "integer", "description": "The id of the note to forget."},
            },
            "required": ["action"],
            "additionalProperties": False,
        },
    },
}


def _stored(ctx: ToolContext) -> list[notes.Note]:
    with ctx.store.read() as conn:
        return notes.list_notes(conn, ctx.owner, LIST_LIMIT)


def _listing(ctx: ToolContext) -> list[dict[str, Any]]:
    forgotten = {op.note_id for op in ctx.memory_ops if op.action == "forget"}
    shown: list[dict[str, Any]] = [
        {"id": note.id, "content": note.content}
        for note in _stored(ctx)
        if note.id not in forgotten
    ]
    shown.extend(
        {"id": None, "content": op.content, "pending": True}
        for op in ctx.memory_ops
        if op.action == "save"
    )
    return shown


def run(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    action = args.get("action")
    if action == "save":
        content = args.get("content")
        if not isinstance(content, str):
            return {"error": "save needs content: the note's text"}
        try:
            text = notes.clean_note(content)
        except ValueError as exc:
            return {"error": str(exc)}
        ctx.memory_ops.append(MemoryOp("save", content=text))
        return {"saved": text, "note": "kept for later conversations with this user"}
    if action == "list":
        listed = _listing(ctx)
        return {"notes": listed, "count": len(listed)}
    if action == "forget":
        note_id = args.get("id")
        if isinstance(note_id, str) and note_id.strip().isdigit():
            note_id = int(note_id)
        if not isinstance(note_id, int) or isinstance(note_id, bool):
            return {"error": "forget needs id: the number of a note from list"}
        if note_id not in {note.id for note in _stored(ctx)}:
            return {"error": f"there is no note {note_id}; call list to see the ids"}
        ctx.memory_ops.append(MemoryOp("forget", note_id=note_id))
        return {"forgotten": note_id}
    return {"error": "action must be save, list or forget"}


TOOL = Tool(NAME, SCHEMA, run, PROMPT)
