"""A turn's attachments: fetched by platform, turned into what this turn's model call needs.

Attachments are turn-scoped. An image goes to the model itself when it has vision, else the
auxiliary model describes it once; audio is transcribed; a text document's text is included.
Every attachment's bytes are stored once in the database's blob table (shared.store.media),
referenced by the session, so any host of a fleet reads them; the transcript names the blob
(`blob:<sha256>`), never a path on one host. What the transcript keeps (`TurnMedia.note`) is
text only — descriptions, transcripts, document text, blob references — so raw bytes never
enter `messages` and are never sent again on later turns.

Fetchers are keyed by platform: a gateway platform registers its own (Telegram file ids, Slack
private URLs) in `build_fetchers`. A terminal attachment whose url is `blob:<sha256>` (the
terminal uploads the bytes of `-a FILE` and `/attach PATH` before its turn is recorded) is read
from the blob table; no other platform's turn may name a blob. A terminal turn recorded by an
older client still names a local `path`: it is read from that path, which works on the host
that has the file (and its bytes then become a blob like any other).
"""

from __future__ import annotations

import base64
import json
import logging
import mimetypes
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from shared import media_objects
from shared.db import Store
from shared.media_objects import MediaObjects, MediaStorageError
from shared.pipeline.inbox import TurnRow
from shared.platforms import CLI
from shared.settings import Settings
from shared.store import media as blobs
from shared.turns import Attachment
from shared.usage import TRANSCRIPTION, ModelCall
from workers.agent.auxiliary import Auxiliary, AuxiliaryUnavailable
from workers.agent.metering import Meter
from workers.agent.window import estimate_tokens
from workers.delivery.fetch import FetchFailed, patiently

log = logging.getLogger(__name__)

TEXT_TYPES = {
    "application/json",
    "application/xml",
    "application/x-yaml",
    "application/yaml",
    "application/toml",
    "application/javascript",
    "application/x-sh",
    "application/sql",
}
TEXT_SUFFIXES = {".md", ".txt", ".rst", ".csv", ".tsv", ".log", ".yaml", ".yml", ".toml", ".ini"}


class FetchError(Exception):
    pass


class Fetcher(Protocol):
    def fetch(self, attachment: Attachment, max_bytes: int) -> bytes: ...


class Transcriber(Protocol):
    def transcribe(
        self, name: str, data: bytes, mime_type: str, meter: Meter | None = None
    ) -> str: ...


class LocalFileFetcher:
    """The terminal's attachments: files on this machine, named by path."""

    def fetch(self, attachment: Attachment, max_bytes: int) -> bytes:
        if not attachment.path:
            raise FetchError("no file path")
        path = Path(attachment.path).expanduser()
        try:
            size = path.stat().st_size
            if size > max_bytes:
                raise FetchError(f"{size} bytes is over the {max_bytes}-byte limit")
            return path.read_bytes()
        except OSError as exc:
            raise FetchError(exc.strerror or str(exc)) from exc


class BlobFetcher:
    """Attachments already in the blob table (`blob:<sha256>`): the same on every host."""

    def __init__(self, store: Store, objects: MediaObjects | None = None) -> None:
        self._store = store
        self._objects = objects

    def fetch(self, attachment: Attachment, max_bytes: int) -> bytes:
        sha = blobs.parse_ref(attachment.url)
        if sha is None:
            raise FetchError("not a blob reference")
        try:
            with self._store.read() as conn:
                found = blobs.read(conn, sha, self._objects)
        except MediaStorageError as exc:
            raise FetchError(str(exc)) from exc
        if found is None:
            raise FetchError(f"{attachment.url} is not in the store (deleted?)")
        if found.size > max_bytes:
            raise FetchError(f"{found.size} bytes is over the {max_bytes}-byte limit")
        return found.data


class Fetchers:
    """A tiny registry: platform → fetcher."""

    def __init__(self) -> None:
        self._by_platform: dict[str, Fetcher] = {}

    def register(self, platform: str, fetcher: Fetcher) -> None:
        self._by_platform[platform] = fetcher

    def get(self, platform: str) -> Fetcher | None:
        return self._by_platform.get(platform)


def build_fetchers(settings: Settings) -> Fetchers:
    """Every platform whose attachments this process can fetch: local files for the terminal,
    each gateway platform with a token through its API."""
    from workers.delivery.fetch import register_platform_fetchers

    fetchers = Fetchers()
    fetchers.register(CLI, LocalFileFetcher())
    register_platform_fetchers(fetchers, settings)
    return fetchers


def attachments_of(turn: TurnRow) -> list[Attachment]:
    if not turn.attachments:
        return []
    try:
        raw = json.loads(turn.attachments)
    except ValueError:
        return []
    fields = set(Attachment.__dataclass_fields__)
    return [
        Attachment(**{k: v for k, v in item.items() if k in fields})
        for item in raw
        if isinstance(item, dict) and "kind" in item
    ]


@dataclass
class Item:
    name: str
    kind: str
    mime_type: str
    note: str
    image: bytes | None = None  # sent natively this turn (vision), never in the transcript
    ref: str | None = None  # `blob:<sha256>`: where every host reads the bytes

    @property
    def noted(self) -> str:
        """The note as the transcript keeps it: with the blob it names, never a host path."""
        return f"{self.note} ({self.ref}, {self.mime_type})" if self.ref else self.note


@dataclass
class TurnMedia:
    items: list[Item] = field(default_factory=list)

    @property
    def note(self) -> str | None:
        notes = [item.noted for item in self.items]
        return "\n\n".join(notes) if notes else None

    @property
    def has_images(self) -> bool:
        return any(item.image is not None for item in self.items)

    def content(self, text: str) -> str | list[dict[str, Any]]:
        """This turn's user content for the model: text plus notes, plus native images."""
        body = "\n\n".join(part for part in (text.strip(), self.note) if part)
        if not self.has_images:
            return body
        parts: list[dict[str, Any]] = [{"type": "text", "text": body}]
        for item in self.items:
            if item.image is not None:
                data = base64.b64encode(item.image).decode("ascii")
                url = f"data:{item.mime_type};base64,{data}"
                parts.append({"type": "image_url", "image_url": {"url": url}})
        return parts


def _mime(attachment: Attachment, name: str) -> str:
    return attachment.mime_type or mimetypes.guess_type(name)[0] or "application/octet-stream"


def _kind(attachment: Attachment, mime: str, name: str) -> str:
    if attachment.kind in ("image", "audio") or mime.split("/")[0] in ("image", "audio"):
        return attachment.kind if attachment.kind in ("image", "audio") else mime.split("/")[0]
    if mime.startswith("text/") or mime in TEXT_TYPES or Path(name).suffix.lower() in TEXT_SUFFIXES:
        return "document"
    return "document" if attachment.kind == "document" else "file"


class MediaProcessor:
    def __init__(
        self,
        settings: Settings,
        fetchers: Fetchers,
        auxiliary: Auxiliary,
        transcriber: Transcriber | None,
        store: Store,
    ) -> None:
        self._store = store
        # media.url: blobs' bytes in object storage (None: in the database).
        self._objects = media_objects.from_settings(settings.media)
        self._blobs = BlobFetcher(store, self._objects)
        self._fetchers = fetchers
        self._aux = auxiliary
        self._aux_vision = settings.auxiliary.vision
        self._transcriber = transcriber
        self._doc_chars = settings.agent.document_chars
        self._max_bytes = blobs.max_bytes_for(settings.agent.max_attachment_mb)

    def close(self) -> None:
        closer = getattr(self._transcriber, "close", None)
        if closer is not None:
            closer()

    def prepare(
        self, turn: TurnRow, session_id: str, *, vision: bool, meter: Meter | None = None
    ) -> TurnMedia:
        """The turn's attachments for the model; descriptions and transcripts go on `meter`."""
        prepared = TurnMedia()
        for index, attachment in enumerate(attachments_of(turn)):
            item = self._one(turn, session_id, index, attachment, vision, meter)
            prepared.items.append(item)
        return prepared

    def _one(
        self,
        turn: TurnRow,
        session_id: str,
        index: int,
        attachment: Attachment,
        vision: bool,
        meter: Meter | None,
    ) -> Item:
        name = attachment.name or Path(attachment.path or attachment.url or "attachment").name
        if blobs.parse_ref(name) is not None:
            name = "attachment"
        mime = _mime(attachment, name)
        kind = _kind(attachment, mime, name)
        fetcher = self._fetcher(turn.platform, attachment)
        if fetcher is None:
            note = f"[{kind}: {name} — not fetched: no fetcher for {turn.platform} attachments]"
            return Item(name, kind, mime, note)
        try:
            data = patiently(lambda: fetcher.fetch(attachment, self._max_bytes))
        except (FetchError, FetchFailed) as exc:  # the platforms' fetchers raise FetchFailed
            return Item(name, kind, mime, f"[{kind}: {name} — could not be read: {exc}]")
        try:
            ref = self._keep(session_id, name, mime, data)
        except (blobs.MediaRefused, MediaStorageError) as exc:
            return Item(name, kind, mime, f"[{kind}: {name} — not stored: {exc}]")
        item = self._item(name, kind, mime, data, session_id, index, vision, meter)
        item.ref = ref
        return item

    def _fetcher(self, platform: str, attachment: Attachment) -> Fetcher | None:
        # Only the terminal uploads blobs itself; a platform's payload naming `blob:<sha>` is
        # the platform fetcher's to refuse, so no webhook can pull another session's media in.
        if platform == CLI and blobs.parse_ref(attachment.url) is not None:
            return self._blobs
        return self._fetchers.get(platform)

    def _keep(self, session_id: str, name: str, mime: str, data: bytes) -> str:
        """The bytes in the blob table, referenced by the session; their `blob:<sha256>`."""
        with self._store.write() as conn:
            sha = blobs.put(
                conn,
                data,
                mime,
                max_bytes=self._max_bytes,
                session_id=session_id,
                name=name,
                objects=self._objects,
            )
        return blobs.ref_of(sha)

    def _item(
        self,
        name: str,
        kind: str,
        mime: str,
        data: bytes,
        session_id: str,
        index: int,
        vision: bool,
        meter: Meter | None,
    ) -> Item:
        if kind == "image":
            if vision:
                return Item(name, kind, mime, f"[image: {name}]", image=data)
            item = Item(name, kind, mime, "", image=data)
            return self.described(item, session_id, index, meter)
        if kind == "audio":
            return self._audio(name, mime, data, session_id, index, meter)
        if kind == "document":
            text = _text_of(data)
            if text is not None:
                return Item(name, kind, mime, self._document_note(name, text))
        note = f"[file: {name} ({mime}, {len(data)} bytes) stored; its content is not shown here]"
        return Item(name, "file", mime, note)

    def described(
        self, item: Item, session_id: str, index: int, meter: Meter | None = None
    ) -> Item:
        """An image as text: the auxiliary model's description (or its saved path)."""
        assert item.image is not None
        if self._aux_vision:
            try:
                said = self._aux.describe_image(item.image, item.mime_type, meter)
                description = " ".join(said.split())
                note = _described(item.name, description)
                return Item(item.name, "image", item.mime_type, note, ref=item.ref)
            except AuxiliaryUnavailable as exc:
                log.warning("image %s not described: %s", item.name, exc)
        note = f"[image: {item.name} stored; no model here could look at it]"
        return Item(item.name, "image", item.mime_type, note, ref=item.ref)

    def _audio(
        self, name: str, mime: str, data: bytes, session_id: str, index: int, meter: Meter | None
    ) -> Item:
        if self._transcriber is not None:
            try:
                text = " ".join(self._transcriber.transcribe(name, data, mime, meter).split())
                return Item(name, "audio", mime, f"[audio: {name} — transcript: {text}]")
            except Exception as exc:
                log.warning("audio %s not transcribed: %s", name, exc)
        return Item(name, "audio", mime, f"[audio: {name} stored; not transcribed]")

    def _document_note(self, name: str, text: str) -> str:
        if len(text) > self._doc_chars:
            cut = len(text) - self._doc_chars
            text = text[: self._doc_chars] + f"\n… [{cut} more characters not included]"
        return f"[document: {name}]\n{text}"


def _described(name: str, description: str) -> str:
    return f"[image: {name} — description: {description}]"


def _text_of(data: bytes) -> str | None:
    if b"\x00" in data[:4096]:
        return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None


class OpenAITranscriber:
    """Speech to text through an OpenAI-compatible `/audio/transcriptions` endpoint."""

    def __init__(self, sdk: Any, model: str) -> None:
        self._sdk = sdk
        self._model = model

    def close(self) -> None:
        self._sdk.close()

    def transcribe(self, name: str, data: bytes, mime_type: str, meter: Meter | None = None) -> str:
        started = time.perf_counter()
        result = self._sdk.audio.transcriptions.create(
            model=self._model, file=(name, data, mime_type)
        )
        text = str(getattr(result, "text", result))
        if meter is not None:
            meter.append(self._call(result, text, (time.perf_counter() - started) * 1000))
        return text

    def _call(self, result: Any, text: str, latency_ms: float) -> ModelCall:
        """Token-billed models report `usage` {input_tokens, output_tokens}; others (whisper-1,
        billed by the minute) report none: the transcript's tokens are estimated."""
        usage = getattr(result, "usage", None)
        given_in = getattr(usage, "input_tokens", None)
        given_out = getattr(usage, "output_tokens", None)
        estimated = given_in is None or given_out is None
        return ModelCall(
            kind=TRANSCRIPTION,
            model=self._model,
            at=time.time(),
            input_tokens=int(given_in) if given_in is not None else 0,
            output_tokens=int(given_out) if given_out is not None else estimate_tokens(text),
            latency_ms=latency_ms,
            estimated=estimated,
        )
