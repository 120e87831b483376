"""The one shape every surface's message takes on its way in, and the checks it must pass."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from shared.platforms import CHAT_TYPES, known_platforms
from shared.surrogates import LONE_SURROGATE, storable

MAX_TEXT_CHARS = 32_000
MAX_ID_CHARS = 256
MAX_ATTACHMENTS = 16


class TurnRejected(ValueError):
    """A turn that must not be recorded; the message says which field is wrong."""


@dataclass(frozen=True, slots=True)
class Attachment:
    kind: str  # image | audio | document | file
    name: str | None = None
    mime_type: str | None = None
    url: str | None = None
    path: str | None = None
    size: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            k: v
            for k, v in {
                "kind": self.kind,
                "name": self.name,
                "mime_type": self.mime_type,
                "url": self.url,
                "path": self.path,
                "size": self.size,
            }.items()
            if v is not None
        }


@dataclass(frozen=True, slots=True)
class InboundTurn:
    """A normalised inbound message: who, where, what, and the platform's own event id."""

    platform: str
    chat_id: str
    chat_type: str
    event_id: str
    text: str
    user_id: str | None = None
    user_name: str | None = None
    thread_id: str | None = None
    message_id: str | None = None
    reply_to: str | None = None
    scope: str | None = None  # workspace / guild, when the platform has one
    attachments: tuple[Attachment, ...] = field(default_factory=tuple)

    def attachments_json(self) -> str | None:
        if not self.attachments:
            return None
        return json.dumps([a.as_dict() for a in self.attachments], ensure_ascii=False)


def storable_turn(turn: InboundTurn) -> InboundTurn:
    """`turn` with its free text storable on every database: a NUL or a lone surrogate in the
    text, the sender's name or an attachment's fields becomes U+FFFD (shared.surrogates), the
    rule webhook bodies follow. Ids are checked, not changed: one holding NUL is refused."""
    if not _needs_scrub(turn):
        return turn
    return replace(
        turn,
        text=_storable(turn.text),
        user_name=_storable(turn.user_name),
        attachments=tuple(
            replace(
                a,
                name=_storable(a.name),
                mime_type=_storable(a.mime_type),
                url=_storable(a.url),
                path=_storable(a.path),
            )
            if isinstance(a, Attachment)
            else a
            for a in turn.attachments
        ),
    )


def _storable(value: Any) -> Any:
    return storable(value) if isinstance(value, str) else value


def _needs_scrub(turn: InboundTurn) -> bool:
    values = [turn.text, turn.user_name]
    for a in turn.attachments:
        if isinstance(a, Attachment):
            values += [a.name, a.mime_type, a.url, a.path]
    return any(isinstance(v, str) and LONE_SURROGATE.search(v) for v in values)


def _check_id(name: str, value: str | None, *, required: bool) -> None:
    if value is None or value == "":
        if required:
            raise TurnRejected(f"{name} is required")
        return
    if not isinstance(value, str):
        raise TurnRejected(f"{name} must be a string, not {type(value).__name__}")
    if len(value) > MAX_ID_CHARS:
        raise TurnRejected(f"{name} is longer than {MAX_ID_CHARS} characters")
    if "\x00" in value or "\n" in value or "\r" in value:
        raise TurnRejected(f"{name} contains control characters")


def validate_turn(turn: InboundTurn, *, max_text_chars: int = MAX_TEXT_CHARS) -> None:
    """Raise TurnRejected naming what is wrong; a valid turn passes silently."""
    platforms = known_platforms()
    if turn.platform not in platforms:
        known = ", ".join(sorted(platforms))
        raise TurnRejected(f"unknown platform {turn.platform!r} (known: {known})")
    if turn.chat_type not in CHAT_TYPES:
        known = ", ".join(sorted(CHAT_TYPES))
        raise TurnRejected(f"unknown chat type {turn.chat_type!r} (known: {known})")
    _check_id("chat id", turn.chat_id, required=True)
    _check_id("event id", turn.event_id, required=True)
    for name, value in (
        ("user id", turn.user_id),
        ("thread id", turn.thread_id),
        ("message id", turn.message_id),
        ("reply-to id", turn.reply_to),
        ("scope", turn.scope),
    ):
        _check_id(name, value, required=False)
    if not isinstance(turn.text, str):
        raise TurnRejected("text must be a string")
    if len(turn.text) > max_text_chars:
        raise TurnRejected(f"text is {len(turn.text)} characters; the limit is {max_text_chars}")
    if not turn.text.strip() and not turn.attachments:
        raise TurnRejected("a turn needs text or an attachment")
    if len(turn.attachments) > MAX_ATTACHMENTS:
        raise TurnRejected(f"at most {MAX_ATTACHMENTS} attachments per turn")
