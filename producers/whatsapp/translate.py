"""WhatsApp Cloud API webhook payload (a dict, as POSTed to /whatsapp/webhook) → turns.

Pure: no I/O. One payload may carry several changes and messages, so `translate` gives one
result per message and per status, in order. Decisions it pins (golden files in
tests/fixtures/whatsapp/, shaped as Meta's webhook reference shows them):
- event id = the message's `wamid`: globally unique, so a redelivered webhook is the same
  event and is recorded once.
- status callbacks (sent, delivered, read, failed) are not turns: ignored (a failed one says
  its error, for the log). So are reactions, stickers, unsupported and system messages.
- a message carries `group_id` only in a group (the Groups API): chat = the group, one session
  per participant by default; otherwise chat = the sender's wa_id, a DM.
- a message for another phone number of the business account (`metadata.phone_number_id`) is
  not ours to answer: replies would come from the wrong number.
- media are referenced as `whatsapp:media/<media id>`: the download URL needs the token and
  expires, so the worker asks the Graph API for it when it needs the bytes.
- `context.id` (the user replied to a message) is the turn's reply-to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.platforms import DM, GROUP
from shared.platforms.whatsapp import WHATSAPP
from shared.turns import Attachment, InboundTurn

OBJECT = "whatsapp_business_account"
MEDIA_PREFIX = "whatsapp:media/"
MAX_ID = 256
# type → (attachment kind, text field of the media object)
MEDIA = {
    "image": ("image", "caption"),
    "document": ("document", "caption"),
    "audio": ("audio", None),
    "video": ("file", "caption"),
}
IGNORED_TYPES = {
    "reaction": "a reaction, not a message to answer",
    "sticker": "a sticker: nothing to answer",
    "system": "a system message (number changed, …)",
    "request_welcome": "the chat was opened: nothing said yet",
    "ephemeral": "a disappearing message the API does not show",
    "revoke": "a deleted message",
}


class BadPayload(ValueError):
    """Not a Cloud API webhook (a 400): wrong shapes, a message without its id."""


@dataclass(frozen=True, slots=True)
class Ignored:
    reason: str
    warn: bool = False  # worth a warning in the log (a reply that failed to arrive)


Result = InboundTurn | Ignored


def _dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadPayload(f"{what} must be an object")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadPayload(f"{what} must be a list")
    return value


def _id(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_ID:
        raise BadPayload(f"{what} must be a non-empty string id")
    if any(ch in value for ch in "\x00\r\n"):
        raise BadPayload(f"{what} contains control characters")
    return value


def _names(value: dict[str, Any]) -> dict[str, str]:
    """wa_id → profile name, from the change's `contacts`."""
    found: dict[str, str] = {}
    for contact in _list(value.get("contacts"), "contacts"):
        if not isinstance(contact, dict):
            continue
        profile = contact.get("profile")
        name = profile.get("name") if isinstance(profile, dict) else None
        if isinstance(contact.get("wa_id"), str) and isinstance(name, str) and name.strip():
            found[contact["wa_id"]] = name.strip()
    return found


def _media(msg: dict[str, Any], kind_name: str) -> tuple[str, Attachment]:
    kind, caption_field = MEDIA[kind_name]
    item = _dict(msg.get(kind_name), kind_name)
    media_id = _id(item.get("id"), f"{kind_name}.id")
    mime = item.get("mime_type") if isinstance(item.get("mime_type"), str) else None
    name = item.get("filename") if isinstance(item.get("filename"), str) else None
    caption = item.get(caption_field) if caption_field else None
    text = caption if isinstance(caption, str) else ""
    return text, Attachment(kind, name, mime, f"{MEDIA_PREFIX}{media_id}")


def _text(msg: dict[str, Any], kind: str) -> str | None:
    """The words of a text-like message, or None for a kind that is not."""
    if kind == "text":
        body = _dict(msg.get("text"), "text").get("body")
        return body if isinstance(body, str) else ""
    if kind == "button":  # a template's quick-reply button
        button = msg.get("button")
        return str(button.get("text") or "") if isinstance(button, dict) else ""
    if kind == "interactive":  # a reply button or list row the user picked
        chosen = msg.get("interactive")
        if isinstance(chosen, dict):
            for key in ("button_reply", "list_reply"):
                picked = chosen.get(key)
                if isinstance(picked, dict) and isinstance(picked.get("title"), str):
                    return str(picked["title"])
        return ""
    return None


def _unsupported(msg: dict[str, Any], kind: str) -> Ignored:
    errors = msg.get("errors")
    first = errors[0] if isinstance(errors, list) and errors and isinstance(errors[0], dict) else {}
    detail = " ".join(str(first[k]) for k in ("code", "title") if first.get(k) is not None)
    return Ignored(
        f"{kind} message: WhatsApp does not pass its content on"
        + (f" ({detail})" if detail else "")
    )


def message(msg: Any, names: dict[str, str]) -> Result:
    """One entry of `value.messages` → its turn, or why it is none. Raises BadPayload."""
    msg = _dict(msg, "a message")
    wamid = _id(msg.get("id"), "message.id")
    sender = _id(msg.get("from"), "message.from")
    kind = msg.get("type")
    if not isinstance(kind, str):
        raise BadPayload("message.type must be a string")
    if kind in IGNORED_TYPES:
        return Ignored(IGNORED_TYPES[kind])
    if kind in ("unsupported", "unknown"):
        return _unsupported(msg, kind)
    attachments: tuple[Attachment, ...] = ()
    text = _text(msg, kind)
    if text is None and kind in MEDIA:
        text, attachment = _media(msg, kind)
        attachments = (attachment,)
    if text is None:
        return Ignored(f"{kind} messages are not conversations here")
    if not text.strip() and not attachments:
        return Ignored("nothing to answer (no text or media)")
    group = msg.get("group_id")
    context = msg.get("context")
    replied = context.get("id") if isinstance(context, dict) else None
    return InboundTurn(
        platform=WHATSAPP,
        chat_id=_id(group, "message.group_id") if group is not None else sender,
        chat_type=GROUP if group is not None else DM,
        event_id=wamid,
        text=text,
        user_id=sender,
        user_name=names.get(sender),
        message_id=wamid,
        reply_to=replied if isinstance(replied, str) and replied else None,
        attachments=attachments,
    )


def status(item: Any) -> Ignored:
    """A status callback: never a turn. A failed one names its error (131047 is a reply sent
    outside the 24-hour customer-service window)."""
    item = _dict(item, "a status")
    state = item.get("status")
    if state != "failed":
        return Ignored(f"status callback: {state}")
    errors = item.get("errors")
    first = errors[0] if isinstance(errors, list) and errors and isinstance(errors[0], dict) else {}
    detail = " ".join(str(first[k]) for k in ("code", "title") if first.get(k) is not None)
    reason = f"status callback: failed ({detail or 'no error given'}) for {item.get('id')}"
    return Ignored(reason, warn=True)


def _change(change: Any, phone_number_id: str | None) -> list[Result]:
    change = _dict(change, "a change")
    field = change.get("field")
    value = _dict(change.get("value"), "change.value")
    if field != "messages":
        return [Ignored(f"{field} change: not messages")]
    metadata = value.get("metadata")
    number = metadata.get("phone_number_id") if isinstance(metadata, dict) else None
    messages = _list(value.get("messages"), "value.messages")
    statuses = _list(value.get("statuses"), "value.statuses")
    if phone_number_id is not None and str(number) != phone_number_id:
        return [Ignored(f"for phone number {number}, not ours")]
    names = _names(value)
    results: list[Result] = [message(m, names) for m in messages]
    results.extend(status(s) for s in statuses)
    if not results:
        results.append(Ignored("a change with no messages or statuses"))
    return results


def translate(payload: Any, *, phone_number_id: str | None = None) -> list[Result]:
    """A webhook body → one result per message or status. Raises BadPayload (validating the
    whole body first, so a bad part changes nothing)."""
    payload = _dict(payload, "the body")
    kind = payload.get("object")
    if not isinstance(kind, str):
        raise BadPayload("object must be a string")
    entries = _list(payload.get("entry"), "entry")
    if kind != OBJECT:
        return [Ignored(f"{kind} webhook: not WhatsApp")]
    results: list[Result] = []
    for entry in entries:
        changes = _list(_dict(entry, "an entry").get("changes"), "entry.changes")
        for change in changes:
            results.extend(_change(change, phone_number_id))
    if not results:
        raise BadPayload("a webhook with no changes")
    return results
