"""Media blobs in the store, on SQLite and PostgreSQL: stored once by sha256, size-capped,
deleted with their last session (`sessions delete`, `sessions prune`), swept when no turn took
them, and carried by `sessions export` / `import` (idempotent, checked against their digest)."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from pathlib import Path

import pytest

from shared.db import Store
from shared.settings import Settings
from shared.store import media
from shared.store import sessions as session_rows
from shared.store.reclaim import sweep_media
from tests.integration.test_cli_sessions_support import DAY, NOW, Msg, Seed, invoke, seed

pytestmark = pytest.mark.both_databases

CAP = 1 << 20
A = "20250101_000000_aaaaaa"
B = "20250102_000000_bbbbbb"
C = "20250103_000000_cccccc"
SHARED = b"\x89PNG shared by two sessions " + bytes(range(256)) * 40
ONLY_A = b"%PDF only in A " + bytes(200_000)
ONLY_B = "only in B, UTF-8 text: 東京".encode()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def held(store: Store) -> set[str]:
    with store.read() as conn:
        return {s for s in (sha(SHARED), sha(ONLY_A), sha(ONLY_B)) if media.exists_blob(conn, s)}


@pytest.fixture
def three(store: Store) -> Store:
    """A and B ended long ago (prunable), C live; SHARED is held by A and B."""
    seed(
        store,
        Seed(A, started=NOW - 200 * DAY, ended=NOW - 150 * DAY, messages=[Msg("user", "a")]),
        Seed(B, started=NOW - 120 * DAY, ended=NOW - 100 * DAY, messages=[Msg("user", "b")]),
        Seed(C, started=NOW - 1 * DAY, messages=[Msg("user", "c")]),
    )
    with store.write() as conn:
        media.put(conn, SHARED, "image/png", max_bytes=CAP, session_id=A, name="s.png", now=NOW)
        media.put(conn, SHARED, "image/png", max_bytes=CAP, session_id=B, name="s.png", now=NOW)
        media.put(conn, ONLY_A, "application/pdf", max_bytes=CAP, session_id=A, now=NOW)
        media.put(conn, ONLY_B, "text/plain", max_bytes=CAP, session_id=B, name="b.txt", now=NOW)
    return store


def test_stored_once_by_digest_and_read_back_whole(store: Store) -> None:
    with store.write() as conn:
        first = media.put(conn, ONLY_A, "application/pdf", max_bytes=CAP, session_id=A)
        again = media.put(conn, ONLY_A, "text/plain", max_bytes=CAP, session_id=A)
        other = media.put(conn, ONLY_A, None, max_bytes=CAP, session_id=B)
    assert first == again == other == sha(ONLY_A)
    with store.read() as conn:
        blob = media.read(conn, first)
        assert media.stats(conn) == media.MediaStats(1, len(ONLY_A))
        assert media.session_blobs(conn, A) == media.session_blobs(conn, B) == [first]
        assert media.read(conn, "0" * 64) is None
    assert blob is not None
    assert (blob.data, blob.size, blob.media_type) == (ONLY_A, len(ONLY_A), "application/pdf")
    assert blob.ref == f"blob:{first}" and media.parse_ref(blob.ref) == first
    assert media.parse_ref("blob:../../etc/passwd") is None and media.parse_ref("/tmp/x") is None


def test_over_the_cap_is_refused_and_nothing_is_stored(store: Store) -> None:
    cap = media.max_bytes_for(0.1)  # agent.max_attachment_mb = 0.1
    with store.write() as conn, pytest.raises(media.MediaRefused, match=r"max_attachment_mb"):
        media.put(conn, bytes(cap + 1), "image/png", max_bytes=cap, session_id=A, name="big.png")
    with store.write() as conn:
        media.put(conn, bytes(cap), "image/png", max_bytes=cap, session_id=A)  # at the cap: kept
    with store.read() as conn:
        assert media.stats(conn).blobs == 1 and media.session_blobs(conn, A) == [sha(bytes(cap))]


def test_delete_removes_a_sessions_own_blobs_and_keeps_shared_ones(
    settings: Settings, three: Store
) -> None:
    result = invoke(settings, ["sessions", "delete", A, "--yes"])
    assert result.exit_code == 0, result.output
    assert held(three) == {sha(SHARED), sha(ONLY_B)}  # ONLY_A went with A; B still holds SHARED
    with three.write() as conn:
        assert session_rows.delete_session(conn, B)
    assert held(three) == set()
    with three.read() as conn:
        assert media.stats(conn) == media.MediaStats(0, 0)


def test_prune_removes_blobs_of_pruned_sessions_only(settings: Settings, three: Store) -> None:
    with three.write() as conn:
        media.put(conn, SHARED, "image/png", max_bytes=CAP, session_id=C, now=NOW)  # live C
    result = invoke(settings, ["sessions", "prune", "--older-than", "90", "--yes"])
    assert result.exit_code == 0, result.output
    with three.read() as conn:
        assert (
            session_rows.get_session(conn, A) is None and session_rows.get_session(conn, B) is None
        )
        assert media.session_blobs(conn, C) == [sha(SHARED)]
    assert held(three) == {sha(SHARED)}  # C still holds it


def test_prune_sweeps_uploads_no_turn_took_after_the_grace(store: Store) -> None:
    """The terminal uploads before its turn runs; an upload whose turn never ran is swept."""
    with store.write() as conn:
        old = media.put(conn, b"abandoned", "text/plain", max_bytes=CAP, now=NOW - 2 * DAY)
        fresh = media.put(conn, b"in flight", "text/plain", max_bytes=CAP, now=NOW)
        kept = media.put(
            conn, b"taken", "text/plain", max_bytes=CAP, session_id=C, now=NOW - 3 * DAY
        )
    seed(store, Seed(C, started=NOW - 3 * DAY, messages=[Msg("user", "c")]))
    assert sweep_media(store, now=NOW) == 1
    with store.read() as conn:
        assert not media.exists_blob(conn, old)
        assert media.exists_blob(conn, fresh) and media.exists_blob(conn, kept)


def test_export_import_round_trip_carries_the_bytes_and_is_idempotent(
    settings: Settings, three: Store, tmp_path: Path
) -> None:
    out = tmp_path / "backup.jsonl"
    assert invoke(settings, ["sessions", "export", str(out)]).exit_code == 0
    docs = {doc["id"]: doc for doc in map(json.loads, out.read_text().splitlines())}
    assert {m["sha256"] for m in docs[A]["media"]} == {sha(SHARED), sha(ONLY_A)}
    assert "media" not in docs[C]
    shared_doc = next(m for m in docs[B]["media"] if m["sha256"] == sha(SHARED))
    assert base64.b64decode(shared_doc["data"]) == SHARED
    assert (shared_doc["media_type"], shared_doc["name"]) == ("image/png", "s.png")

    for session_id in (A, B, C):
        assert invoke(settings, ["sessions", "delete", session_id, "--yes"]).exit_code == 0
    assert held(three) == set()
    for _ in range(2):  # a second import changes nothing
        result = invoke(settings, ["sessions", "import", str(out)])
        assert result.exit_code == 0, result.output
    assert "skipped 3 already present, 0 bad lines" in result.output
    assert held(three) == {sha(SHARED), sha(ONLY_A), sha(ONLY_B)}
    with three.read() as conn:
        assert media.stats(conn).blobs == 3
        assert media.session_blobs(conn, A) == sorted([sha(SHARED), sha(ONLY_A)])
        blob = media.read(conn, sha(ONLY_B))
    assert blob is not None and (blob.data, blob.media_type) == (ONLY_B, "text/plain")


def test_an_import_whose_bytes_do_not_match_their_digest_is_a_bad_line(
    settings: Settings, store: Store, tmp_path: Path
) -> None:
    forged = {
        "id": A,
        "source": "cli",
        "started_at": NOW,
        "messages": [],
        "media": [{"sha256": sha(b"real"), "media_type": "text/plain", "data": "ZmFrZQ=="}],
    }
    path = tmp_path / "forged.jsonl"
    path.write_text(json.dumps(forged) + "\n")
    result = invoke(settings, ["sessions", "import", str(path)])
    assert "does not match its sha256" in result.output
    with store.read() as conn:
        assert session_rows.get_session(conn, A) is None and media.stats(conn).blobs == 0


def test_two_hosts_storing_the_same_bytes_at_once_keep_one_blob(store: Store) -> None:
    """Both look, find nothing and insert: the second insert is skipped, not an error."""
    first_in = threading.Event()
    errors: list[BaseException] = []

    def holder() -> None:
        try:
            with store.write() as conn:
                media.put(conn, ONLY_A, "application/pdf", max_bytes=CAP, session_id=A)
                first_in.set()
                time.sleep(0.5)  # the other writer reaches its insert meanwhile
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
            first_in.set()

    thread = threading.Thread(target=holder)
    thread.start()
    first_in.wait(10)
    with store.write() as conn:
        assert media.put(conn, ONLY_A, "application/pdf", max_bytes=CAP, session_id=B)
    thread.join(10)
    assert not errors
    with store.read() as conn:
        assert media.stats(conn).blobs == 1
        assert media.session_blobs(conn, A) == media.session_blobs(conn, B) == [sha(ONLY_A)]


def test_files_an_older_version_saved_on_this_host_go_with_their_session(
    settings: Settings, three: Store
) -> None:
    """Older versions saved some attachments under $HERMES_HOME/media/<session>/; delete and
    prune remove the folder of each session they delete, and leave every other one."""
    folders = {sid: settings.media_dir / sid for sid in (A, B, C)}
    for folder in folders.values():
        folder.mkdir(parents=True)
        (folder / "1-report.bin").write_bytes(b"saved by an older version")
    unrelated = settings.media_dir / "notes.txt"
    unrelated.write_text("not a session's folder")
    assert invoke(settings, ["sessions", "prune", "--older-than", "90", "--yes"]).exit_code == 0
    assert not folders[A].exists() and not folders[B].exists() and folders[C].exists()
    assert invoke(settings, ["sessions", "delete", C, "--yes"]).exit_code == 0
    assert not folders[C].exists() and unrelated.exists()
