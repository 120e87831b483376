"""Nothing host-local: media crosses hosts through the database, on SQLite and PostgreSQL.

Two "hosts" are two HERMES_HOMEs on one database and one Redis. The terminal on one uploads
the bytes of `-a FILE`; the file is then removed, and a worker on the other reads the blob. A
Telegram photo fetched by the worker is kept as a blob whose `blob:<sha256>` the transcript
names, with no path of any host in it. Real processes throughout: `hermes -q`, `hermes
worker`, `hermes gateway telegram`, the fake Bot API on 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from shared.db import open_store
from shared.db.schema import inbox as inbox_table
from shared.pipeline import inbox
from shared.store import media, messages
from tests.fakes.golden import load
from tests.fakes.server import free_port
from tests.fakes.stack import Proc, redis_db_url, start_gateway, start_worker, wait_for
from tests.fakes.telegram_api import FakeTelegram
from tests.integration.terminal_kit import Terminal, term_env, terminals
from tests.integration.test_agent_media import PNG
from tests.integration.test_cli_sessions_support import hermes
from tests.integration.test_db_cli import assert_one_line_failure

pytestmark = pytest.mark.both_databases
__all__ = ["term_env", "terminals"]  # fixtures

REDIS_DB = 13
TG_TOKEN = "123456789:AAFakeTokenForTestsMediaSecret"
TG_SECRET = "webhook-secret-media"
PLAN = "# Plan\n- ship the fleet on Friday\n"


def two_hosts(
    hermes_env: dict[str, str], tmp_path: Path, redis_url: str
) -> tuple[dict[str, str], ...]:
    """Environments of two hosts sharing one database and one broker, each its own home."""
    shared_db = tmp_path / "data-host" / "state.db"
    db = hermes_env.get("HERMES_DATABASE_URL") or f"sqlite:///{shared_db}"
    common = {k: v for k, v in hermes_env.items() if k != "HERMES_HOME"}
    common |= {"HERMES_DATABASE_URL": db, "HERMES_BROKER_URL": redis_db_url(redis_url, REDIS_DB)}
    envs = []
    for name in ("host-a", "host-b"):
        home = tmp_path / name
        home.mkdir()
        envs.append({**common, "HERMES_HOME": str(home)})
    return tuple(envs)


def turns_of(db: str, platform: str) -> list[inbox.TurnRow]:
    store = open_store(db)
    try:
        with store.read() as conn:
            ids = conn.execute(
                select(inbox_table.c.id).where(inbox_table.c.platform == platform)
            ).scalars()
            found = [inbox.get_turn(conn, turn_id) for turn_id in ids]
    finally:
        store.close()
    return [turn for turn in found if turn is not None]


def user_text(db: str, session_id: str) -> str:
    store = open_store(db)
    try:
        with store.read() as conn:
            rows = messages.transcript(conn, session_id)
    finally:
        store.close()
    return "\n".join(m.content or "" for m in rows if m.role == "user")


def finished(db: str, platform: str) -> list[inbox.TurnRow]:
    turns = turns_of(db, platform)
    return turns if turns and all(t.status == inbox.DONE for t in turns) else []


@pytest.mark.timeout(180)
def test_a_file_the_terminal_attaches_is_read_by_a_worker_on_another_host(
    hermes_env: dict[str, str], tmp_path: Path, redis_url: str
) -> None:
    client, far = two_hosts(hermes_env, tmp_path, redis_url)
    db = client["HERMES_DATABASE_URL"]
    files = tmp_path / "client-files"
    files.mkdir()
    (files / "plan.md").write_text(PLAN)
    # The turn is recorded while no worker runs: it waits in the inbox with its blob.
    sent = hermes(client, "chat", "-q", "my plan?", "-a", str(files / "plan.md"), "--timeout", "1")
    assert sent.returncode == 1 and "stays queued" in sent.stderr, sent.stderr
    shutil.rmtree(files)  # gone from the client: only the uploaded bytes remain
    (waiting,) = turns_of(db, "cli")
    (attached,) = json.loads(waiting.attachments or "[]")
    digest = hashlib.sha256(PLAN.encode()).hexdigest()
    assert attached == {
        "kind": "document",
        "name": "plan.md",
        "mime_type": "text/markdown",
        "url": f"blob:{digest}",
        "size": len(PLAN),
    }  # no path of the client's in the turn

    worker = start_worker(far, Path(far["HERMES_HOME"]))
    try:
        (done,) = wait_for(lambda: finished(db, "cli"), timeout=120)  # type: ignore[misc]
    finally:
        logs = worker.output()
        assert worker.stop() == 0, logs
    assert done.session_id
    said = user_text(db, done.session_id)
    assert "ship the fleet on Friday" in said, logs  # the worker read the bytes
    assert f"blob:{digest}" in said and str(tmp_path) not in said
    assert not (Path(far["HERMES_HOME"]) / "media").exists()


def test_a_file_over_the_cap_is_refused_by_the_terminal_and_nothing_is_stored(
    hermes_env: dict[str, str], tmp_path: Path
) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(bytes(20_000))
    env = {**hermes_env, "HERMES_AGENT__MAX_ATTACHMENT_MB": "0.01"}
    result = hermes(env, "chat", "-q", "look", "-a", str(big), "--timeout", "1")
    assert result.returncode == 2
    assert_one_line_failure(result, "big.bin is 20,000 bytes", "agent.max_attachment_mb")
    db = hermes_env.get("HERMES_DATABASE_URL") or f"sqlite:///{tmp_path / 'hermes' / 'state.db'}"
    if db.startswith("sqlite") and not Path(db.removeprefix("sqlite:///")).exists():
        return  # refused before the store was even opened
    store = open_store(db)
    try:
        with store.read() as conn:
            assert media.stats(conn).blobs == 0
            assert conn.execute(select(inbox_table.c.id)).first() is None
    finally:
        store.close()


def _photo(update_id: int, file_id: str) -> dict[str, Any]:
    payload, _ = load("telegram", "photo_caption")
    update = json.loads(json.dumps(payload))
    update["update_id"] = update_id
    update["message"]["photo"][-1]["file_id"] = file_id
    return dict(update)


@pytest.mark.timeout(180)
def test_a_telegram_photo_is_a_blob_the_transcript_names_with_no_host_path(
    hermes_env: dict[str, str], tmp_path: Path, redis_url: str
) -> None:
    receiver, worker_host = two_hosts(hermes_env, tmp_path, redis_url)
    db = receiver["HERMES_DATABASE_URL"]
    with FakeTelegram(TG_TOKEN) as telegram:
        port = free_port()
        platform = {
            "HERMES_PLATFORMS__TELEGRAM__TOKEN": TG_TOKEN,
            "HERMES_PLATFORMS__TELEGRAM__WEBHOOK_SECRET": TG_SECRET,
            "HERMES_PLATFORMS__TELEGRAM__API_BASE": telegram.api_base,
            "HERMES_GATEWAY__PORT": str(port),
        }
        telegram.files["AgACAgQAAxkBAAIBcat"] = PNG
        procs: list[Proc] = []
        try:
            procs.append(
                start_worker({**worker_host, **platform}, Path(worker_host["HERMES_HOME"]))
            )
            home = Path(receiver["HERMES_HOME"])
            procs.append(start_gateway({**receiver, **platform}, home, "telegram", port))
            response = httpx.post(
                f"http://127.0.0.1:{port}/telegram/webhook",
                json=_photo(900, "AgACAgQAAxkBAAIBcat"),
                headers={"X-Telegram-Bot-Api-Secret-Token": TG_SECRET},
                timeout=10,
            )
            assert response.status_code == 200
            wait_for(lambda: telegram.sent("111111111"), timeout=120)
            (done,) = wait_for(lambda: finished(db, "telegram"), timeout=60)  # type: ignore[misc]
        finally:
            logs = "\n".join(proc.output() for proc in procs)
            codes = [proc.stop() for proc in reversed(procs)]
    assert codes == [0, 0], logs
    digest = hashlib.sha256(PNG).hexdigest()
    assert done.session_id
    said = user_text(db, done.session_id)
    assert said.startswith("what is this?")
    assert f"blob:{digest}, image/jpeg" in said, said
    for host in (receiver, worker_host):
        assert host["HERMES_HOME"] not in said
        assert not (Path(host["HERMES_HOME"]) / "media").exists()
    store = open_store(db)
    try:
        with store.read() as conn:
            blob = media.read(conn, digest)
            assert media.session_blobs(conn, done.session_id) == [digest]
    finally:
        store.close()
    assert blob is not None and blob.data == PNG and blob.media_type == "image/jpeg"


@pytest.mark.timeout(180)
def test_attach_in_a_chat_uploads_the_bytes_and_refuses_over_the_cap(
    term_env: dict[str, str], terminals: list[Terminal], tmp_path: Path
) -> None:
    plan, big = tmp_path / "plan.md", tmp_path / "big.bin"
    plan.write_text(PLAN)
    big.write_bytes(bytes(20_000))
    env = {**term_env, "HERMES_AGENT__MAX_ATTACHMENT_MB": "0.01"}
    chat = Terminal(env, "chat")
    terminals.append(chat)
    chat.ready()
    chat.say(f"/attach {big}", expect="Not attached: big.bin is 20,000 bytes")
    chat.say(f"/attach {plan}", expect="Attached plan.md (document)")
    chat.say("what does it say?", expect="ship the fleet on Friday")
    out = chat.leave()
    assert f"blob:{hashlib.sha256(PLAN.encode()).hexdigest()}" in out
    db = term_env.get("HERMES_DATABASE_URL") or f"sqlite:///{term_env['HERMES_HOME']}/state.db"
    (turn,) = turns_of(db, "cli")
    assert str(tmp_path) not in (turn.attachments or "") and turn.session_id
    assert str(tmp_path) not in user_text(db, turn.session_id)
    store = open_store(db)
    try:
        with store.read() as conn:
            assert media.stats(conn).blobs == 1  # the refused file stored nothing
    finally:
        store.close()
