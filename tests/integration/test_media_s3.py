"""Media in S3-compatible object storage (`media.url`), on SQLite and PostgreSQL.

moto's server runs on 127.0.0.1 (a free port) and every request goes through boto3 pointed at
it with `media.endpoint_url`, as a fleet would point it at MinIO. The rows keep the metadata;
the bytes are objects under `<prefix>/<sha256>`: stored once, read back, deleted with their
last session (delete, prune, sweep) once the deletion committed, carried by export/import, and
a bucket that does not answer is a clear error that leaves no row without its object.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from shared.db import Store, open_store
from shared.db.schema import inbox as inbox_table
from shared.db.schema import media_blobs
from shared.db.schema import sessions as sessions_table
from shared.media_objects import MediaObjects, MediaStorageError, from_settings
from shared.sections import MediaSettings
from shared.settings import Settings
from shared.store import media
from shared.store import sessions as session_rows
from shared.store.reclaim import sweep_media
from tests.fakes.server import free_port
from tests.fakes.stack import start_worker, wait_for
from tests.integration.test_cli_sessions_support import (
    DAY,
    NOW,
    Msg,
    Seed,
    hermes,
    invoke,
    seed,
)
from tests.integration.test_db_cli import assert_one_line_failure
from tests.integration.test_db_copy import copy, pg_target
from tests.integration.test_media_fleet import PLAN, finished, two_hosts, user_text

boto3 = pytest.importorskip("boto3")
moto_server = pytest.importorskip("moto.server")

pytestmark = pytest.mark.both_databases
__all__ = ["pg_target"]  # fixtures

CAP = 1 << 20
A = "20250101_000000_aaaaaa"
B = "20250102_000000_bbbbbb"
C = "20250103_000000_cccccc"
SHARED = b"\x89PNG shared by two sessions " + bytes(range(256)) * 40
ONLY_A = b"%PDF only in A " + bytes(200_000)
ONLY_B = "only in B, UTF-8 text: 東京".encode()
KEY_ID, SECRET = "testing-key-id", "testing-secret"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def bucket(s3_endpoint: str) -> str:
    name = f"hermes-{uuid.uuid4().hex[:12]}"
    client(s3_endpoint).create_bucket(Bucket=name)
    return name


def client(endpoint: str) -> Any:
    return boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET,
    )


def keys(endpoint: str, bucket: str) -> set[str]:
    listed = client(endpoint).list_objects_v2(Bucket=bucket)
    return {str(item["Key"]) for item in listed.get("Contents", [])}


def s3_env(endpoint: str, bucket: str) -> dict[str, str]:
    """`media.*` for a subprocess; credentials through boto3's own chain (AWS_* variables)."""
    return {
        "HERMES_MEDIA__URL": f"s3://{bucket}/fleet/media",
        "HERMES_MEDIA__ENDPOINT_URL": endpoint,
        "HERMES_MEDIA__REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET,
    }


def media_settings(endpoint: str, bucket: str) -> MediaSettings:
    return MediaSettings.model_validate(
        {
            "url": f"s3://{bucket}/fleet/media",
            "endpoint_url": endpoint,
            "region": "us-east-1",
            "access_key_id": KEY_ID,
            "secret_access_key": SECRET,
        }
    )


@pytest.fixture
def s3_settings(settings: Settings, s3_endpoint: str, bucket: str) -> Settings:
    return settings.model_copy(update={"media": media_settings(s3_endpoint, bucket)})


@pytest.fixture
def objects(s3_settings: Settings) -> MediaObjects:
    built = from_settings(s3_settings.media)
    assert built is not None
    return built


def key(sha256: str) -> str:
    return f"fleet/media/{sha256}"


def rows(store: Store) -> dict[str, tuple[bytes, str | None]]:
    with store.read() as conn:
        found = conn.execute(
            select(media_blobs.c.sha256, media_blobs.c.data, media_blobs.c.location)
        )
        return {str(r.sha256): (bytes(r.data), r.location) for r in found}


@pytest.fixture
def three(store: Store, objects: MediaObjects) -> Store:
    """A and B ended long ago (prunable), C live; SHARED is held by A and B; bytes in S3."""
    seed(
        store,
        Seed(A, started=NOW - 200 * DAY, ended=NOW - 150 * DAY, messages=[Msg("user", "a")]),
        Seed(B, started=NOW - 120 * DAY, ended=NOW - 100 * DAY, messages=[Msg("user", "b")]),
        Seed(C, started=NOW - 1 * DAY, messages=[Msg("user", "c")]),
    )
    with store.write() as conn:
        for session, data, kind in (
            (A, SHARED, "image/png"),
            (B, SHARED, "image/png"),
            (A, ONLY_A, "application/pdf"),
            (B, ONLY_B, "text/plain"),
        ):
            media.put(conn, data, kind, max_bytes=CAP, session_id=session, objects=objects)
    return store


def test_bytes_go_to_the_bucket_once_and_read_back_whole(
    store: Store, objects: MediaObjects, s3_endpoint: str, bucket: str
) -> None:
    with store.write() as conn:
        first = media.put(conn, ONLY_A, "application/pdf", max_bytes=CAP, session_id=A,
                          objects=objects)  # fmt: skip
        again = media.put(conn, ONLY_A, "text/plain", max_bytes=CAP, session_id=B, objects=objects)
    assert first == again == sha(ONLY_A)
    assert keys(s3_endpoint, bucket) == {key(first)}
    stored = client(s3_endpoint).get_object(Bucket=bucket, Key=key(first))
    assert stored["Body"].read() == ONLY_A and stored["ContentType"] == "application/pdf"
    # The row keeps the metadata only, and names the store.
    assert rows(store) == {first: (b"", f"s3://{bucket}/fleet/media")}
    with store.read() as conn:
        blob = media.read(conn, first, objects)
        assert media.stats(conn) == media.MediaStats(1, len(ONLY_A))
        assert media.session_blobs(conn, A) == media.session_blobs(conn, B) == [first]
        # Without media.url the row's bytes cannot be found: said plainly, never b"".
        with pytest.raises(MediaStorageError, match=r"stored in s3://.*media\.url is not set"):
            media.read(conn, first)
    assert blob is not None and (blob.data, blob.size) == (ONLY_A, len(ONLY_A))


def test_blobs_stored_before_media_url_was_set_are_still_read_from_the_database(
    store: Store, objects: MediaObjects, s3_endpoint: str, bucket: str
) -> None:
    with store.write() as conn:
        old = media.put(conn, ONLY_B, "text/plain", max_bytes=CAP, session_id=A)
        media.put(conn, ONLY_B, "text/plain", max_bytes=CAP, session_id=B, objects=objects)
    assert keys(s3_endpoint, bucket) == set()  # already held: not uploaded again
    with store.read() as conn:
        found = media.read(conn, old, objects)
    assert found is not None and found.data == ONLY_B


def test_delete_removes_a_sessions_own_objects_and_keeps_shared_ones(
    s3_settings: Settings, three: Store, s3_endpoint: str, bucket: str
) -> None:
    everything = {key(sha(d)) for d in (SHARED, ONLY_A, ONLY_B)}
    assert keys(s3_endpoint, bucket) == everything
    result = invoke(s3_settings, ["sessions", "delete", A, "--yes"])
    assert result.exit_code == 0, result.output
    assert keys(s3_endpoint, bucket) == everything - {key(sha(ONLY_A))}
    assert set(rows(three)) == {sha(SHARED), sha(ONLY_B)}
    result = invoke(s3_settings, ["sessions", "delete", B, "--yes"])
    assert result.exit_code == 0, result.output
    assert keys(s3_endpoint, bucket) == set() and rows(three) == {}


def test_prune_removes_objects_of_pruned_sessions_only(
    s3_settings: Settings, three: Store, objects: MediaObjects, s3_endpoint: str, bucket: str
) -> None:
    with three.write() as conn:  # C (live) shares ONLY_B with B
        media.put(conn, ONLY_B, "text/plain", max_bytes=CAP, session_id=C, objects=objects)
    result = invoke(s3_settings, ["sessions", "prune", "--older-than", "90", "--yes"])
    assert result.exit_code == 0, result.output
    assert keys(s3_endpoint, bucket) == {key(sha(ONLY_B))}
    assert set(rows(three)) == {sha(ONLY_B)}
    with three.read() as conn:
        found = media.read(conn, sha(ONLY_B), objects)
    assert found is not None and found.data == ONLY_B


def test_the_sweep_removes_untaken_uploads_and_orphan_objects_after_the_grace(
    store: Store, objects: MediaObjects, s3_endpoint: str, bucket: str
) -> None:
    now = time.time()
    with store.write() as conn:  # an upload whose turn never ran: no reference
        media.put(conn, ONLY_A, "application/pdf", max_bytes=CAP, objects=objects, now=now)
    orphan = sha(b"an object whose row never committed")
    objects.put(orphan, b"an object whose row never committed", "text/plain")
    assert sweep_media(store, now=now, objects=objects) == 0  # within the grace: kept
    assert keys(s3_endpoint, bucket) == {key(sha(ONLY_A)), key(orphan)}
    later = now + media.UNREFERENCED_GRACE_SECONDS + 60
    assert sweep_media(store, now=later, objects=objects) == 1
    assert keys(s3_endpoint, bucket) == set() and rows(store) == {}


def test_export_carries_the_bytes_and_import_puts_them_in_the_configured_store(
    s3_settings: Settings,
    settings: Settings,
    three: Store,
    tmp_path: Path,
    s3_endpoint: str,
    bucket: str,
) -> None:
    out = tmp_path / "export.jsonl"
    assert invoke(s3_settings, ["sessions", "export", str(out)]).exit_code == 0
    docs = {d["id"]: d for d in map(json.loads, out.read_text().splitlines())}
    assert {m["sha256"] for m in docs[A]["media"]} == {sha(SHARED), sha(ONLY_A)}
    for session_id in (A, B):
        assert invoke(s3_settings, ["sessions", "delete", session_id, "--yes"]).exit_code == 0
    assert keys(s3_endpoint, bucket) == set()

    result = invoke(s3_settings, ["sessions", "import", str(out)])
    assert result.exit_code == 0, result.output
    everything = {sha(d) for d in (SHARED, ONLY_A, ONLY_B)}
    assert keys(s3_endpoint, bucket) == {key(s) for s in everything}
    assert all(location is not None for _, location in rows(three).values())
    again = tmp_path / "again.jsonl"
    assert invoke(s3_settings, ["sessions", "export", str(again)]).exit_code == 0
    redone = {d["id"]: d for d in map(json.loads, again.read_text().splitlines())}
    for session_id in (A, B):  # the same bytes, read from the bucket
        assert redone[session_id]["media"] == docs[session_id]["media"]

    # Imported where media.url is unset: the bytes land in the database.
    for session_id in (A, B):
        assert invoke(s3_settings, ["sessions", "delete", session_id, "--yes"]).exit_code == 0
    result = invoke(settings, ["sessions", "import", str(out)])
    assert result.exit_code == 0, result.output
    assert keys(s3_endpoint, bucket) == set()
    held = rows(three)
    assert set(held) == everything and all(location is None for _, location in held.values())
    assert held[sha(ONLY_A)][0] == ONLY_A


def test_an_unreachable_bucket_is_a_clear_error_and_leaves_no_row(
    store: Store, settings: Settings, hermes_env: dict[str, str], tmp_path: Path
) -> None:
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    down = from_settings(media_settings(closed, "gone"))
    assert down is not None
    with store.write() as conn, pytest.raises(MediaStorageError, match=r"s3://gone/.*could not"):
        media.put(conn, ONLY_A, "application/pdf", max_bytes=CAP, session_id=A, objects=down)
    assert rows(store) == {}
    with store.read() as conn:
        assert media.session_blobs(conn, A) == []

    env = {**hermes_env, **s3_env(closed, "gone")}
    # The terminal's `-a FILE`: refused with the store's reason, no turn and no row recorded.
    plan = tmp_path / "plan.md"
    plan.write_text("# Plan\n")
    sent = hermes(env, "chat", "-q", "my plan?", "-a", str(plan), "--timeout", "1")
    assert sent.returncode == 2, sent.stderr
    said = " ".join(sent.stderr.split())  # the console wraps long lines
    assert "Traceback" not in said and SECRET not in said, sent.stderr
    assert "hermes: an attachment could not be stored: media store s3://gone/fleet/media" in said
    with store.read() as conn:
        assert conn.execute(select(inbox_table.c.id)).first() is None
    assert rows(store) == {}

    # An import into it stops with the reason; the rolled-back batch leaves no row behind.
    seed(store, Seed(A, started=NOW - DAY, messages=[Msg("user", "a")]))
    with store.write() as conn:
        media.put(conn, ONLY_B, "text/plain", max_bytes=CAP, session_id=A, name="b.txt")
    path = tmp_path / "one.jsonl"
    assert invoke(settings, ["sessions", "export", str(path)]).exit_code == 0
    assert invoke(settings, ["sessions", "delete", A, "--yes"]).exit_code == 0
    assert rows(store) == {}
    result = hermes(env, "sessions", "import", str(path))
    assert result.returncode == 2, result.stderr
    assert_one_line_failure(result, "media store s3://gone/fleet/media: could not store blob")
    assert rows(store) == {}
    with store.read() as conn:
        assert media.session_blobs(conn, A) == []
        assert conn.execute(select(sessions_table.c.id)).first() is None


def test_a_bucket_that_does_not_exist_is_refused_with_its_name(
    store: Store, s3_endpoint: str
) -> None:
    missing = from_settings(media_settings(s3_endpoint, "no-such-bucket"))
    assert missing is not None
    with store.write() as conn, pytest.raises(MediaStorageError, match=r"NoSuchBucket"):
        media.put(conn, ONLY_B, "text/plain", max_bytes=CAP, session_id=A, objects=missing)
    assert rows(store) == {}


@pytest.mark.timeout(180)
def test_a_worker_on_another_host_reads_the_terminals_attachment_from_the_bucket(
    hermes_env: dict[str, str], tmp_path: Path, redis_url: str, s3_endpoint: str, bucket: str
) -> None:
    client_env, far_env = (
        {**env, **s3_env(s3_endpoint, bucket)} for env in two_hosts(hermes_env, tmp_path, redis_url)
    )
    db = client_env["HERMES_DATABASE_URL"]
    files = tmp_path / "client-files"
    files.mkdir()
    (files / "plan.md").write_text(PLAN)
    sent = hermes(
        client_env, "chat", "-q", "my plan?", "-a", str(files / "plan.md"), "--timeout", "1"
    )
    assert sent.returncode == 1 and "stays queued" in sent.stderr, sent.stderr
    shutil.rmtree(files)  # gone from the client: only the uploaded object remains
    digest = sha(PLAN.encode())
    assert keys(s3_endpoint, bucket) == {key(digest)}

    worker = start_worker(far_env, Path(far_env["HERMES_HOME"]))
    try:
        (done,) = wait_for(lambda: finished(db, "cli"), timeout=120)  # type: ignore[misc]
    finally:
        logs = worker.output()
        assert worker.stop() == 0, logs
    said = user_text(db, done.session_id or "")
    assert "ship the fleet on Friday" in said, logs  # the worker read the object's bytes
    assert f"blob:{digest}" in said and str(tmp_path) not in said
    store = open_store(db)
    try:
        assert rows(store) == {digest: (b"", f"s3://{bucket}/fleet/media")}
        with store.read() as conn:
            assert media.session_blobs(conn, done.session_id or "") == [digest]
    finally:
        store.close()


def test_db_copy_moves_the_metadata_and_the_bytes_stay_in_the_bucket(
    hermes_env: dict[str, str],
    three: Store,
    objects: MediaObjects,
    pg_target: str,
    tmp_path: Path,
    s3_endpoint: str,
    bucket: str,
) -> None:
    source = hermes_env.get("HERMES_DATABASE_URL") or f"sqlite:///{three.path}"
    target = pg_target if three.dialect == "sqlite" else f"sqlite:///{tmp_path / 'copy.db'}"
    before = keys(s3_endpoint, bucket)
    copied = copy(hermes_env, source, target)
    assert copied.returncode == 0, copied.stderr
    assert keys(s3_endpoint, bucket) == before  # nothing uploaded again, nothing deleted
    moved = open_store(target)
    try:
        assert rows(moved) == rows(three)
        with moved.read() as conn:
            found = media.read(conn, sha(ONLY_A), objects)
        assert found is not None and found.data == ONLY_A
    finally:
        moved.close()


def test_config_check_shows_the_media_settings_with_the_secret_masked(
    hermes_env: dict[str, str],
) -> None:
    env = {
        **hermes_env,
        "HERMES_MEDIA__URL": "s3://fleet-media/prod",
        "HERMES_MEDIA__ENDPOINT_URL": "http://10.1.0.2:9000",
        "HERMES_MEDIA__ACCESS_KEY_ID": KEY_ID,
        "HERMES_MEDIA__SECRET_ACCESS_KEY": SECRET,
    }
    done = hermes(env, "config", "check", "--json")
    assert done.returncode == 0, done.stderr
    found = {row["key"]: row["value"] for row in map(json.loads, done.stdout.splitlines())}
    assert found["media.url"] == "s3://fleet-media/prod"
    assert found["media.endpoint_url"] == "http://10.1.0.2:9000"
    assert found["media.access_key_id"] == KEY_ID
    assert found["media.secret_access_key"].startswith("***")
    assert SECRET not in done.stdout and SECRET not in done.stderr


def test_a_media_url_that_is_not_s3_is_refused_naming_the_key(
    hermes_env: dict[str, str],
) -> None:
    env = {**hermes_env, "HERMES_MEDIA__URL": "https://bucket.example.com/media"}
    done = hermes(env, "config", "check")
    assert done.returncode == 2, done.stdout
    assert "media.url" in done.stderr and "s3://bucket" in done.stderr, done.stderr


def test_a_failed_object_delete_leaves_an_orphan_the_sweep_removes_never_a_dangling_row(
    s3_settings: Settings, three: Store, objects: MediaObjects, s3_endpoint: str, bucket: str
) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    down = s3_settings.model_copy(update={"media": media_settings(closed, bucket)})
    result = invoke(down, ["sessions", "delete", A, "--yes"])
    assert result.exit_code == 0, result.output  # the session is gone all the same
    assert set(rows(three)) == {sha(SHARED), sha(ONLY_B)}  # no row without its object
    assert key(sha(ONLY_A)) in keys(s3_endpoint, bucket)  # an orphan object
    with three.read() as conn:  # every row left still reads
        assert all(media.read(conn, s, objects) for s in (sha(SHARED), sha(ONLY_B)))
    later = time.time() + media.UNREFERENCED_GRACE_SECONDS + 60
    sweep_media(three, now=later, objects=objects)
    assert keys(s3_endpoint, bucket) == {key(sha(SHARED)), key(sha(ONLY_B))}


def test_an_object_whose_row_was_written_again_is_not_deleted(
    three: Store, objects: MediaObjects, s3_endpoint: str, bucket: str
) -> None:
    dropped: list[str] = []
    with three.write() as conn:
        assert session_rows.delete_session(conn, A, dropped)
    assert dropped == [sha(ONLY_A)]  # SHARED is still B's
    # Before this host deletes the object, another one stores the same bytes again.
    with three.write() as conn:
        media.put(conn, ONLY_A, "application/pdf", max_bytes=CAP, session_id=C, objects=objects)
    assert media.forget(three, objects, dropped) == []
    assert key(sha(ONLY_A)) in keys(s3_endpoint, bucket)
    with three.read() as conn:
        found = media.read(conn, sha(ONLY_A), objects)
    assert found is not None and found.data == ONLY_A


@pytest.mark.timeout(180)
def test_a_worker_that_cannot_reach_the_bucket_says_so_in_the_transcript(
    hermes_env: dict[str, str], tmp_path: Path, redis_url: str, s3_endpoint: str, bucket: str
) -> None:
    client_env, far_env = two_hosts(hermes_env, tmp_path, redis_url)
    client_env |= s3_env(s3_endpoint, bucket)
    far_env |= s3_env(f"http://127.0.0.1:{free_port()}", bucket)  # its route to it is down
    db = client_env["HERMES_DATABASE_URL"]
    plan = tmp_path / "plan.md"
    plan.write_text(PLAN)
    sent = hermes(client_env, "chat", "-q", "my plan?", "-a", str(plan), "--timeout", "1")
    assert sent.returncode == 1 and "stays queued" in sent.stderr, sent.stderr
    worker = start_worker(far_env, Path(far_env["HERMES_HOME"]))
    try:
        (done,) = wait_for(lambda: finished(db, "cli"), timeout=120)  # type: ignore[misc]
    finally:
        logs = worker.output()
        assert worker.stop() == 0, logs
    said = user_text(db, done.session_id or "")
    assert "plan.md — could not be read: media store s3://" in said, said
    assert "ship the fleet on Friday" not in said
    assert keys(s3_endpoint, bucket) == {key(sha(PLAN.encode()))}  # the upload is intact
