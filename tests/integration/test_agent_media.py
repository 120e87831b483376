"""Attachments against the fake endpoint: images (vision and not), audio, documents, other files.

What the transcript keeps is text only: never the bytes, never re-sent on later turns.
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from producers.intake import accept
from shared.db import Store
from shared.pipeline import inbox
from shared.settings import Settings
from shared.store import media, messages
from shared.turns import Attachment
from tests.fakes.openai_server import FakeOpenAI, reply, running
from tests.integration.test_agent import AUX, MAIN, model_settings
from tests.pipeline_helpers import make_runtime, turn
from workers.agent.factory import build_agent
from workers.drain import drain
from workers.runtime import Runtime

# A real 1x1 PNG.
pytestmark = pytest.mark.both_databases

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with running() as server:
        yield server


def runtime_for(settings: Settings, store: Store) -> tuple[Runtime, object]:
    agent = build_agent(settings, store)
    rt, _ = make_runtime(settings, store, agent)
    return rt, agent


@pytest.fixture
def image(tmp_path: Path) -> Attachment:
    path = tmp_path / "cat.png"
    path.write_bytes(PNG)
    return Attachment(kind="image", name="cat.png", mime_type="image/png", path=str(path))


def _turn_user_text(store: Store, turn_id: int) -> str:
    with store.read() as conn:
        row = inbox.get_turn(conn, turn_id)
        assert row is not None and row.session_id
        first = messages.transcript(conn, row.session_id)
    user = [m for m in first if m.role == "user"]
    return user[-1].content or ""


def _send(rt: Runtime, settings: Settings, n: int, **extra: object) -> int:
    accepted = accept(rt.store, rt.waker, turn(n, **extra), settings=settings, clock=time.time)
    drain(rt, accepted.session_key)
    return accepted.turn_id


def test_vision_less_model_gets_the_auxiliary_models_description(
    hermes_env: dict[str, str], fake: FakeOpenAI, store: Store, image: Attachment
) -> None:
    settings = model_settings(hermes_env, fake)  # model.vision is false by default
    rt, agent = runtime_for(settings, store)
    try:
        fake.script(reply("A black cat asleep on a red sofa."), model=AUX)
        turn_id = _send(rt, settings, 1, text="what is this?", attachments=(image,))
        (aux_request,) = fake.chats(AUX)
        assert aux_request.has_image()
        (main_request,) = fake.chats(MAIN)
        assert not main_request.has_image()
        assert "black cat asleep on a red sofa" in main_request.text()
        stored = _turn_user_text(store, turn_id)
        assert stored.startswith("what is this?")
        assert "[image: cat.png — description: A black cat asleep on a red sofa.]" in stored
        assert base64.b64encode(PNG).decode()[:20] not in stored
        _send(rt, settings, 2, text="and its colour?")
        later = fake.chats(MAIN)[-1]
        assert not later.has_image() and "red sofa" in later.text()  # the description, only
        assert len(fake.chats(AUX)) == 1  # described once
    finally:
        rt.renewer.close()
        agent.close()  # type: ignore[attr-defined]


def test_vision_model_gets_the_image_once_and_a_refusal_falls_back_to_a_description(
    hermes_env: dict[str, str], fake: FakeOpenAI, store: Store, image: Attachment
) -> None:
    settings = model_settings(hermes_env, fake, HERMES_MODEL__VISION="true")
    rt, agent = runtime_for(settings, store)
    try:
        turn_id = _send(rt, settings, 1, text="look", attachments=(image,))
        (sent,) = fake.chats(MAIN)
        assert sent.has_image()
        assert "[image: cat.png]" in _turn_user_text(store, turn_id)
        _send(rt, settings, 2, text="again?")
        assert not fake.chats(MAIN)[-1].has_image()  # turn-scoped: never re-sent

        fake.no_vision.add(MAIN)  # the endpoint says it does not take images after all
        fake.script(reply("A tiny grey square."), model=AUX)
        refused = _send(rt, settings, 3, text="and this one?", attachments=(image,))
        main = fake.chats(MAIN)
        assert main[-2].has_image() and not main[-1].has_image()
        assert "tiny grey square" in main[-1].text()
        assert "description: A tiny grey square." in _turn_user_text(store, refused)
    finally:
        rt.renewer.close()
        agent.close()  # type: ignore[attr-defined]


def test_audio_is_transcribed_documents_included_other_files_stored_as_blobs(
    hermes_env: dict[str, str], fake: FakeOpenAI, store: Store, tmp_path: Path
) -> None:
    settings = model_settings(hermes_env, fake, HERMES_TRANSCRIPTION__MODEL="whisper-test")
    rt, agent = runtime_for(settings, store)
    voice = tmp_path / "note.ogg"
    voice.write_bytes(b"OggS fake audio")
    notes = tmp_path / "notes.md"
    notes.write_text("# Plan\n- ship it on Friday\n")
    blob = tmp_path / "data.bin"
    blob.write_bytes(bytes(range(256)))
    fake.transcript = "remind me to call Ana"
    try:
        turn_id = _send(
            rt,
            settings,
            1,
            text="",
            attachments=(
                Attachment(kind="audio", name="note.ogg", mime_type="audio/ogg", path=str(voice)),
                Attachment(kind="document", name="notes.md", path=str(notes)),
                Attachment(kind="file", name="data.bin", path=str(blob)),
            ),
        )
        (spoken,) = [r for r in fake.requests if r.path.endswith("/audio/transcriptions")]
        assert spoken.body["model"] == "whisper-test" and b"OggS fake audio" in spoken.raw
        sent = fake.chats(MAIN)[0].text()
        assert "transcript: remind me to call Ana" in sent
        assert "ship it on Friday" in sent
        # nothing is saved on this host: the bytes are in the blob table, named by digest
        assert not settings.media_dir.exists()
        sha = hashlib.sha256(bytes(range(256))).hexdigest()
        assert f"blob:{sha}" in sent
        with store.read() as conn:
            held = media.read(conn, sha)
            session_id = inbox.get_turn(conn, turn_id).session_id  # type: ignore[union-attr]
            kept = media.session_blobs(conn, session_id)
        assert held is not None and held.data == bytes(range(256))
        audio_sha = hashlib.sha256(b"OggS fake audio").hexdigest()
        assert audio_sha in kept and sha in kept and len(kept) == 3
        stored = _turn_user_text(store, turn_id)
        assert "[audio: note.ogg — transcript: remind me to call Ana]" in stored
        assert "[document: notes.md]" in stored and f"blob:{sha}" in stored
        assert str(tmp_path) not in stored  # no path of this host in the transcript
    finally:
        rt.renewer.close()
        agent.close()  # type: ignore[attr-defined]


def test_a_platform_turn_cannot_name_a_blob_only_the_terminal_uploads_them(
    hermes_env: dict[str, str], fake: FakeOpenAI, store: Store, tmp_path: Path
) -> None:
    """A terminal upload is read by digest; a webhook naming the same digest gets nothing."""
    settings = model_settings(hermes_env, fake, HERMES_PLATFORMS__TELEGRAM__TOKEN="1:AAx")
    secret = b"private notes of another session"
    with store.write() as conn:
        sha = media.put(conn, secret, "text/plain", max_bytes=1 << 20, session_id="someone")
    rt, agent = runtime_for(settings, store)
    named = Attachment(kind="document", name="n.txt", mime_type="text/plain", url=f"blob:{sha}")
    try:
        mine = _send(rt, settings, 1, text="mine", attachments=(named,))
        theirs = _send(rt, settings, 2, chat="c2", platform="telegram", attachments=(named,))
        assert "private notes of another session" in _turn_user_text(store, mine)
        said = _turn_user_text(store, theirs)
        assert "could not be read: not a Telegram file reference" in said
        assert "private notes" not in said
    finally:
        rt.renewer.close()
        agent.close()  # type: ignore[attr-defined]
