"""`hermes db check`, `hermes db backup` and beat's backup sweep on real state.db files."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from shared.db import open_store
from shared.settings import load_settings
from tests.pipeline_helpers import make_runtime
from workers.cli import beat_config
from workers.sweeps import backup as backup_sweep

ROOT = Path(__file__).resolve().parents[2]


def hermes(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "producers.cli.main", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _filled(env: dict[str, str], home: Path) -> Path:
    rows = [
        {
            "id": f"2025010{i}_000000_abcdef",
            "source": "cli",
            "started_at": 1.7e9 + i,
            "title": f"T{i}",
            "messages": [{"role": "user", "content": f"hello {i}", "timestamp": 1.7e9 + i}] * 3,
        }
        for i in range(1, 4)
    ]
    (home / "in.jsonl").write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    done = hermes(env, "sessions", "import", str(home / "in.jsonl"))
    assert done.returncode == 0, done.stderr
    return home / "state.db"


@pytest.mark.both_databases
def test_check_says_what_it_did(
    hermes_env: dict[str, str], hermes_home: Path, database_url: str | None
) -> None:
    _filled(hermes_env, hermes_home)
    done = hermes(hermes_env, "db", "check")
    assert done.returncode == 0, done.stderr
    if database_url is None:
        assert done.stdout.strip().endswith(": ok")
    else:  # page and index integrity is the server's: said so, never a silent "ok"
        assert "PostgreSQL" in done.stdout and "nothing checked" in done.stdout


def test_check_finds_a_wrong_counter_and_a_damaged_search_index(
    hermes_env: dict[str, str], hermes_home: Path
) -> None:
    db = _filled(hermes_env, hermes_home)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE sessions SET message_count = 99 WHERE id = '20250101_000000_abcdef'")
    conn.execute("DELETE FROM messages_fts_data WHERE id > 10")
    conn.commit()
    conn.close()
    done = hermes(hermes_env, "db", "check")
    assert done.returncode == 1
    assert "session 20250101_000000_abcdef: message_count 99 but 3 messages" in done.stdout
    assert "search index messages_fts" in done.stdout
    assert len(done.stderr.strip().splitlines()) == 1 and "backups" in done.stderr


def test_backup_makes_a_checked_0600_copy_and_keeps_the_newest(
    hermes_env: dict[str, str], hermes_home: Path
) -> None:
    _filled(hermes_env, hermes_home)
    folder = hermes_home / "backups"
    folder.mkdir(mode=0o700)
    for stamp in ("20200101T000000Z", "20200102T000000Z"):
        (folder / f"state-{stamp}.db").write_bytes(b"old")
    done = hermes(hermes_env, "db", "backup", "--keep", "2")
    assert done.returncode == 0, done.stderr
    kept = sorted(p.name for p in folder.iterdir())
    assert len(kept) == 2 and kept[0] == "state-20200102T000000Z.db", kept
    copy = folder / kept[1]
    assert copy.stat().st_mode & 0o777 == 0o600
    conn = sqlite3.connect(copy)
    assert conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 3
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    conn.close()
    named = hermes(hermes_env, "db", "backup", str(hermes_home / "mine.db"))
    assert named.returncode == 0 and (hermes_home / "mine.db").exists()
    again = hermes(hermes_env, "db", "backup", str(hermes_home / "mine.db"))
    assert again.returncode != 0 and "already exists" in again.stderr


@pytest.mark.both_databases
def test_backup_copies_sqlite_and_sends_postgres_to_pg_dump(
    hermes_env: dict[str, str], database_url: str | None
) -> None:
    backup = hermes(hermes_env, "db", "backup")
    if database_url is None:
        assert backup.returncode == 0 and "Backed up to" in backup.stdout, backup.stderr
        return
    assert backup.returncode == 2 and "pg_dump" in backup.stderr
    assert len(backup.stderr.strip().splitlines()) == 1


def test_beat_takes_backups_only_when_asked(hermes_env: dict[str, str]) -> None:
    assert "backup" not in beat_config(load_settings(hermes_env))
    on = load_settings({**hermes_env, "HERMES_MAINTENANCE__BACKUP_HOURS": "6"})
    assert beat_config(on)["backup"]["schedule"] == 6 * 3600


def test_backup_sweep_copies_once_per_period_keeping_n(hermes_env: dict[str, str]) -> None:
    settings = load_settings(
        {
            **hermes_env,
            "HERMES_MAINTENANCE__BACKUP_HOURS": "1",
            "HERMES_MAINTENANCE__BACKUP_KEEP": "2",
        }
    )
    store = open_store(settings.resolved_database_url)
    try:
        now = [1_780_000_000.0]
        rt, _ = make_runtime(settings, store, clock=lambda: now[0])
        made = []
        for step in range(4):
            report = backup_sweep.sweep(rt)
            assert report.reason == "made", report
            assert report.path is not None
            made.append(report.path)
            os.utime(report.path, (now[0], now[0]))  # written "now" on the injected clock
            assert backup_sweep.sweep(rt).reason == "recent"  # a double fire
            assert report.removed == (1 if step >= 2 else 0)
            now[0] += 3600
        folder = settings.home / "backups"
        assert sorted(str(p) for p in folder.iterdir()) == sorted(made[-2:])
    finally:
        store.close()
