"""Hermes' old transcript files, read into session documents for the store's import path.

Before state.db, Hermes' gateway appended each message of a session to
`$HERMES_HOME/sessions/<session id>.jsonl`: one JSON object a line, an OpenAI-style message
(`role` user / assistant / tool / system, `content` — text, null, or a list of parts —
`tool_calls`, `tool_call_id`, `tool_name`, `message_id`) plus the `timestamp` it was written
at (ISO 8601 in the machine's local time, no zone), and first a `session_meta` line
(`model`, `platform`, `tools`, `timestamp`) that is no message. The session id is the file
name; it must be a session id (shared/ids.py), which also keeps any other file out.

Reading writes nothing. A line that cannot be a message is reported with its number and
left out; the file's other lines still make the session.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Any

from shared.ids import looks_like_session_id
from shared.platforms import CLI

FOLDER = "sessions"  # under HERMES_HOME
SUFFIX = ".jsonl"
META = "session_meta"
ROLES = frozenset({"user", "assistant", "tool", "system"})
END_REASON = "legacy_import"
UNKNOWN_SOURCE = "legacy"  # a gateway transcript whose platform the file does not say
LOCAL_PLATFORM = "local"  # Hermes' name for the terminal
SOURCE_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,31}\Z")
ID_GRAMMAR = "YYYYMMDD_HHMMSS_ then 6 or 8 lowercase hex digits"
# What a non-text part of a message becomes in its text (the bytes were never in the file).
PART_NAMES = {"image_url": "image", "input_image": "image", "input_audio": "audio"}


@dataclass
class LegacyTranscript:
    """One file as read: the session document to import, or why the whole file is refused."""

    path: Path
    session_id: str
    document: dict[str, Any] | None = None
    bad: list[tuple[int, str]] = field(default_factory=list)
    refused: str | None = None

    @property
    def messages(self) -> int:
        return len(self.document["messages"]) if self.document else 0


class BadMessage(ValueError):
    """A line that is not a message; the text says why."""


def transcript_files(directory: Path) -> list[Path]:
    """The `*.jsonl` regular files directly in `directory`, by name (ids sort by time)."""
    return sorted(path for path in directory.iterdir() if path.suffix == SUFFIX and path.is_file())


def session_id_of(path: Path) -> str | None:
    """The session id a transcript file is named after, or None when the name is not one."""
    stem = path.name.removesuffix(SUFFIX)
    return stem if looks_like_session_id(stem) else None


def _timestamp(value: Any, zone: tzinfo | None) -> float | None:
    """POSIX seconds from an ISO 8601 text (naive: local time) or a number; None if absent."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise BadMessage(f"timestamp {value!r} is not a time")
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str):
        raise BadMessage(f"timestamp {value!r} is not a time")
    try:
        moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise BadMessage(f"timestamp {value!r} is not ISO 8601") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone) if zone is not None else moment.astimezone()
    return moment.timestamp()


def _part_text(part: Any) -> str:
    if isinstance(part, str):
        return part
    if isinstance(part, dict):
        kind = part.get("type")
        if kind in ("text", "input_text", "output_text") and isinstance(part.get("text"), str):
            return str(part["text"])
        if isinstance(kind, str):
            return f"[{PART_NAMES.get(kind, kind)}]"
        return json.dumps(part, ensure_ascii=False)
    return json.dumps(part, ensure_ascii=False)


def _content(value: Any) -> str | None:
    """Message text: a string as is; a list of parts as their text, one part a line (images
    and other non-text parts as `[image]` …); an object as its JSON."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_part_text(part) for part in value)
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    raise BadMessage("content must be text, a list of parts or null")


def _optional_text(item: dict[str, Any], name: str) -> str | None:
    value = item.get(name)
    if value is None or isinstance(value, str):
        return value
    if name == "platform_message_id" and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise BadMessage(f"{name} must be text")


def message_of(item: Any, zone: tzinfo | None) -> dict[str, Any]:
    """One legacy line as a message of the store's import format; BadMessage if it is none."""
    if not isinstance(item, dict):
        raise BadMessage("expected a JSON object (one message per line)")
    role = item.get("role")
    if role not in ROLES:
        raise BadMessage(f"unknown role {role!r}" if role is not None else "no role")
    tool_calls = item.get("tool_calls")
    if tool_calls is not None and not isinstance(tool_calls, list | dict):
        raise BadMessage("tool_calls must be a list")
    renamed = {**item, "platform_message_id": item.get("message_id")}
    message = {
        "role": role,
        "content": _content(item.get("content")),
        "tool_calls": tool_calls or None,
        "tool_call_id": _optional_text(renamed, "tool_call_id"),
        "tool_name": _optional_text(renamed, "tool_name"),
        "platform_message_id": _optional_text(renamed, "platform_message_id"),
        "timestamp": _timestamp(item.get("timestamp"), zone),
    }
    _storable(message)
    return message


def _storable(message: dict[str, Any]) -> None:
    """JSON's \\ud800 escapes decode to lone surrogates, which no database stores: refuse this
    line here, or the store would refuse the whole session."""
    try:
        json.dumps(message, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise BadMessage("not valid Unicode text (a lone surrogate escape)") from None


def _source(meta: dict[str, Any], session_id: str) -> str:
    platform = meta.get("platform")
    if isinstance(platform, str) and platform.strip():
        name = platform.strip().lower()
        if name in (LOCAL_PLATFORM, CLI):
            return CLI
        if SOURCE_PATTERN.match(name):
            return name
    # No platform said: 6 hex digits are a terminal session's id, 8 a gateway's.
    return CLI if len(session_id.rsplit("_", 1)[1]) == 6 else UNKNOWN_SOURCE


def _id_time(session_id: str, zone: tzinfo | None) -> float:
    """The time stamped into the id (Hermes wrote it in local time)."""
    stamp = datetime.strptime(session_id[:15], "%Y%m%d_%H%M%S")
    return (stamp.replace(tzinfo=zone) if zone is not None else stamp.astimezone()).timestamp()


def _read_lines(
    transcript: LegacyTranscript, raw_lines: list[bytes], zone: tzinfo | None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The first session_meta line and the messages; bad lines go to `transcript.bad`."""
    meta: dict[str, Any] = {}
    found: list[dict[str, Any]] = []
    for number, raw in enumerate(raw_lines, 1):
        if not raw.strip():
            continue
        try:
            item = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as error:
            transcript.bad.append((number, f"not UTF-8 text (byte {error.start + 1})"))
            continue
        except json.JSONDecodeError as error:
            transcript.bad.append((number, f"invalid JSON: {error.msg} at column {error.colno}"))
            continue
        except RecursionError:
            transcript.bad.append((number, "invalid JSON: nested too deeply"))
            continue
        if isinstance(item, dict) and item.get("role") == META:
            if not meta:
                meta = item
            continue
        try:
            found.append(message_of(item, zone))
        except BadMessage as error:
            transcript.bad.append((number, str(error)))
    return meta, found


def read_transcript(path: Path, zone: tzinfo | None = None) -> LegacyTranscript:
    """Read one file into a session document (ended at its last message, as old sessions are).

    `zone` reads zone-less timestamps (default: this machine's local time, as Hermes wrote
    them). A file with no message gives no document and nothing to import.
    """
    session_id = session_id_of(path)
    transcript = LegacyTranscript(path, session_id or path.name)
    if session_id is None:
        transcript.refused = (
            f"{path.name!r} is not named <session id>.jsonl (a session id is {ID_GRAMMAR}): "
            "not read"
        )
        return transcript
    try:
        raw_lines = path.read_bytes().splitlines()
    except OSError as error:
        transcript.refused = f"cannot read it: {error.strerror or error}"
        return transcript
    meta, found = _read_lines(transcript, raw_lines, zone)
    if not found:
        return transcript
    try:
        meta_time = _timestamp(meta.get("timestamp"), zone)
    except BadMessage:
        meta_time = None
    times = [t for t in [meta_time, *(m["timestamp"] for m in found)] if t is not None]
    started = min(times) if times else _id_time(session_id, zone)
    ended = max(times) if times else started
    model = meta.get("model")
    transcript.document = {
        "id": session_id,
        "source": _source(meta, session_id),
        "model": model if isinstance(model, str) else None,
        "started_at": started,
        "last_active_at": ended,
        "ended_at": ended,
        "end_reason": END_REASON,
        "messages": found,
    }
    return transcript
