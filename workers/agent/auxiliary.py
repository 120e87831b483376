"""The auxiliary model: short jobs beside the conversation — titles, summaries, image descriptions.

With no endpoint configured the offline twin answers with deterministic heuristics (it cannot
describe images or audio: those say so).
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Sequence
from typing import Any, Protocol

from shared.model import MessageRecord
from shared.usage import IMAGE, SUMMARY, TITLE
from workers.agent.client import ChatClient
from workers.agent.metering import Meter, model_call

SUMMARY_CHARS = 60_000  # of transcript given to the summariser (the newest part)
TITLE_INPUT_CHARS = 2_000
OFFLINE_SUMMARY_LINES = 12

TITLE_PROMPT = (
    "Write a title for this conversation: 3 to 7 words, in the same language as the user's "
    "message. Reply with the title only: no quotes, no trailing punctuation, no prefix."
)
SUMMARY_PROMPT = (
    "Summarise this conversation so that it can continue without the original messages. "
    "Keep every fact, decision, name, number, file path, open question and the user's "
    "preferences; say what was being worked on last. Write in the conversation's language. "
    "Reply with the summary only."
)
DESCRIBE_PROMPT = (
    "Describe this image for someone who cannot see it: what it shows, any text in it "
    "(verbatim), and details that matter. Be concise."
)


class AuxiliaryUnavailable(Exception):
    """This job cannot be done here (offline, or the model failed)."""


class Auxiliary(Protocol):
    """Each job appends the model calls it made to `meter`, when one is given."""

    name: str

    def title(self, first_user: str, first_reply: str, meter: Meter | None = None) -> str: ...

    def summarise(self, messages: Sequence[MessageRecord], meter: Meter | None = None) -> str: ...

    def describe_image(self, data: bytes, mime_type: str, meter: Meter | None = None) -> str: ...


def transcript_for(messages: Sequence[MessageRecord], limit: int = SUMMARY_CHARS) -> str:
    lines = []
    for message in messages:
        if message.role not in ("user", "assistant", "system") or not message.content:
            continue
        label = "Earlier summary" if message.role == "system" else message.role.capitalize()
        lines.append(f"{label}: {message.content.strip()}")
    text = "\n\n".join(lines)
    return text if len(text) <= limit else "…" + text[-limit:]


class ModelAuxiliary:
    """The auxiliary model behind an OpenAI-compatible endpoint."""

    def __init__(self, client: ChatClient) -> None:
        self.client = client
        self.name = client.model

    def close(self) -> None:
        self.client.close()

    def _ask(
        self, system: str, content: str | list[dict[str, object]], kind: str, meter: Meter | None
    ) -> str:
        sent: list[dict[str, Any]] = [
            {"role": "system", "content": system},
            {"role": "user", "content": content},
        ]
        try:
            reply = self.client.complete(sent, stream=False)
        except Exception as exc:
            raise AuxiliaryUnavailable(f"{self.name}: {exc}") from exc
        if meter is not None:
            meter.append(model_call(reply, kind=kind, model=self.name, at=time.time(), sent=sent))
        text = reply.content.strip()
        if not text:
            raise AuxiliaryUnavailable(f"{self.name} returned nothing")
        return text

    def title(self, first_user: str, first_reply: str, meter: Meter | None = None) -> str:
        limit = TITLE_INPUT_CHARS
        content = f"User: {first_user[:limit]}\n\nAssistant: {first_reply[:limit]}"
        return self._ask(TITLE_PROMPT, content, TITLE, meter)

    def summarise(self, messages: Sequence[MessageRecord], meter: Meter | None = None) -> str:
        return self._ask(SUMMARY_PROMPT, transcript_for(messages), SUMMARY, meter)

    def describe_image(self, data: bytes, mime_type: str, meter: Meter | None = None) -> str:
        url = f"data:{mime_type};base64,{base64.b64encode(data).decode('ascii')}"
        parts: list[dict[str, object]] = [
            {"type": "text", "text": DESCRIBE_PROMPT},
            {"type": "image_url", "image_url": {"url": url}},
        ]
        return self._ask(DESCRIBE_PROMPT, parts, IMAGE, meter)


_WORD_RE = re.compile(r"[^\W_][\w'’-]*", re.UNICODE)
_URL_RE = re.compile(r"https?://\S+")
# Where a clause ends: sentence punctuation, a comma or colon before a space, a spaced dash.
_CLAUSE_RE = re.compile(r"[.!?;。！？；\n]+|[,:，：](?=\s|$)|\s[-–—]+\s")
TITLE_MIN_WORDS = 3
TITLE_MAX_WORDS = 7
UNSPACED_MIN_CHARS = 4  # one long "word" is a sentence in a script without spaces (CJK)
_GREETINGS = frozenset({
    "hi", "hii", "hello", "hey", "heya", "hiya", "yo", "howdy", "greetings", "hallo", "hola",
    "bonjour", "salut", "ciao", "ok", "okay", "so", "well", "um", "uh", "hmm", "thanks", "thx",
})  # fmt: skip
_GREETED = frozenset({
    "there", "all", "everyone", "everybody", "folks", "guys", "friend", "buddy", "again",
})  # fmt: skip
_DAY_PARTS = frozenset({"morning", "afternoon", "evening", "day"})


def _without_greeting(words: list[str]) -> tuple[list[str], bool]:
    """`words` less a leading "hi", "hello there", "good morning", "thanks"…; and whether one
    was taken."""
    lowered = [w.lower() for w in words]
    i = 0
    while i < len(words):
        if lowered[i] in _GREETINGS:
            i += 1
        elif lowered[i] == "good" and i + 1 < len(words) and lowered[i + 1] in _DAY_PARTS:
            i += 2
        elif i > 0 and lowered[i] in _GREETED:
            i += 1
        else:
            break
    return words[i:], i > 0


def _meaningful_clauses(text: str) -> list[list[str]]:
    clauses = []
    greeting = True  # greetings only count at the start of the message
    for clause in _CLAUSE_RE.split(text):
        words: list[str] = _WORD_RE.findall(clause)
        if greeting:
            words, _ = _without_greeting(words)
            greeting = not words
        if words:
            clauses.append(words)
    return clauses


def heuristic_title(first_user: str) -> str | None:
    """Offline: a title from the first message — past a greeting, up to the first clause break
    that leaves 3 to 7 words. None when fewer than 3 meaningful words are left ("hi!")."""
    text = _URL_RE.sub(" ", first_user)
    text = re.sub(r"^/\w+\s*", "", text.strip())
    clauses = _meaningful_clauses(text)
    if not clauses:
        return None
    first = clauses[0]
    if len(first) == 1 and len(first[0]) >= UNSPACED_MIN_CHARS and not first[0].isascii():
        return first[0][:16]  # an unspaced script (CJK): a short prefix
    words = next((c for c in clauses if len(c) >= TITLE_MIN_WORDS), None)
    if words is None:  # only short clauses: run them together
        words = [w for c in clauses for w in c]
    if len(words) < TITLE_MIN_WORDS:
        return None
    title = " ".join(words[:TITLE_MAX_WORDS])
    return title[0].upper() + title[1:]


def first_words(first_user: str) -> str | None:
    """The last resort: the first words of the message as they are ("Hi")."""
    words: list[str] = _WORD_RE.findall(_URL_RE.sub(" ", first_user))
    if not words:
        return None
    title = " ".join(words[:TITLE_MAX_WORDS])
    return title[0].upper() + title[1:]


class OfflineAuxiliary:
    """No network: titles from the first message, summaries from the messages themselves."""

    name = "offline"

    def title(self, first_user: str, first_reply: str, meter: Meter | None = None) -> str:
        del first_reply, meter
        title = heuristic_title(first_user)
        if title is None:
            raise AuxiliaryUnavailable("nothing to make a title from")
        return title

    def summarise(self, messages: Sequence[MessageRecord], meter: Meter | None = None) -> str:
        said = [
            f"- {m.role}: {' '.join((m.content or '').split())[:160]}"
            for m in messages
            if m.role in ("user", "assistant", "system") and m.content
        ]
        if not said:
            raise AuxiliaryUnavailable("nothing to summarise")
        head = "[offline summary] The conversation so far, message by message (shortened):"
        kept = said[-OFFLINE_SUMMARY_LINES:]
        skipped = len(said) - len(kept)
        if skipped:
            kept.insert(0, f"- ({skipped} earlier messages)")
        return "\n".join([head, *kept])

    def describe_image(self, data: bytes, mime_type: str, meter: Meter | None = None) -> str:
        raise AuxiliaryUnavailable("no model is configured to describe images")
