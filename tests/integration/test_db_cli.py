"""`hermes db status|upgrade`, --help, --version and one-line failures, via the real script."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from producers.cli.app import App
from producers.cli.main import cli
from shared import __version__
from shared.db import StoreError, open_store
from shared.db.engine import connect
from shared.db.migrate import HEAD
from shared.settings import Settings
from shared.store import lineage
from shared.store import messages as message_rows
from shared.store import sessions as session_rows
from tests.integration.storekit import make_db_at, raw, sqlite_url

ROOT = Path(__file__).resolve().parents[2]
OLD = "0001"


def hermes_script() -> str:
    found = shutil.which("hermes", path=str(Path(sys.executable).parent)) or shutil.which("hermes")
    assert found, "the hermes console script is installed with the package"
    return found


def hermes(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [hermes_script(), *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def assert_one_line_failure(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def stamped(path: Path) -> str:
    with raw(path) as conn:
        return str(conn.execute("SELECT version_num FROM alembic_version").fetchone()[0])


def old_db_with_data(path: Path) -> None:
    make_db_at(path, OLD)
    store = connect(sqlite_url(path))
    try:
        with store.write() as conn:
            session_rows.create_session(
                conn, session_id="20200101_000000_abcdef", source="cli", now=1.0, title="Old"
            )
            message_rows.append_message(conn, "20200101_000000_abcdef", "user", "kept", now=1.0)
    finally:
        store.close()


def assert_old_data_intact(path: Path) -> None:
    store = open_store(sqlite_url(path))
    try:
        with store.read() as conn:
            record = lineage.resolve(conn, "Old")
            assert record.message_count == 1
            assert [m.content for m in message_rows.transcript(conn, record.id)] == ["kept"]
    finally:
        store.close()


# --- the entry point itself ---


def test_help(hermes_env: dict[str, str]) -> None:
    result = hermes(hermes_env, "--help")
    assert result.returncode == 0, result.stderr
    assert "Usage:" in result.stdout
    for command in ("sessions", "db"):
        assert command in result.stdout


def test_version(hermes_env: dict[str, str]) -> None:
    result = hermes(hermes_env, "--version")
    assert result.returncode == 0, result.stderr
    assert __version__ in result.stdout


def test_db_help(hermes_env: dict[str, str], hermes_home: Path) -> None:
    result = hermes(hermes_env, "db", "--help")
    assert result.returncode == 0, result.stderr
    assert "status" in result.stdout
    assert "upgrade" in result.stdout
    assert not (hermes_home / "state.db").exists()  # help touches nothing


# --- status and upgrade through the console script ---


def test_fresh_home_status_then_upgrade(hermes_env: dict[str, str], hermes_home: Path) -> None:
    status = hermes(hermes_env, "db", "status")
    assert status.returncode == 0, status.stderr
    assert "empty" in status.stdout
    assert HEAD in status.stdout

    upgrade = hermes(hermes_env, "db", "upgrade")
    assert upgrade.returncode == 0, upgrade.stderr
    assert f"to {HEAD}" in upgrade.stdout
    assert stamped(hermes_home / "state.db") == HEAD

    status = hermes(hermes_env, "db", "status")
    assert "up to date" in status.stdout
    again = hermes(hermes_env, "db", "upgrade")
    assert again.returncode == 0
    assert "already" in again.stdout


def test_older_db_is_reported_then_upgraded(hermes_env: dict[str, str], hermes_home: Path) -> None:
    path = hermes_home / "state.db"
    old_db_with_data(path)

    status = hermes(hermes_env, "db", "status")
    assert status.returncode == 0, status.stderr
    assert f"schema {OLD}" in status.stdout
    assert "hermes db upgrade" in status.stdout
    assert stamped(path) == OLD  # status only looks

    upgrade = hermes(hermes_env, "db", "upgrade")
    assert upgrade.returncode == 0, upgrade.stderr
    assert "Upgraded" in upgrade.stdout
    assert f"from schema {OLD} to {HEAD}" in upgrade.stdout
    assert stamped(path) == HEAD
    assert_old_data_intact(path)
    assert path.stat().st_mode & 0o777 == 0o600


def test_older_db_is_upgraded_by_any_command(hermes_env: dict[str, str], hermes_home: Path) -> None:
    path = hermes_home / "state.db"
    old_db_with_data(path)
    result = hermes(hermes_env, "sessions", "list")
    assert result.returncode == 0, result.stderr
    assert "20200101_000000_abcdef" in result.stdout
    assert stamped(path) == HEAD


@pytest.mark.parametrize("command", ["status", "upgrade"])
def test_foreign_db_is_refused(hermes_env: dict[str, str], hermes_home: Path, command: str) -> None:
    path = hermes_home / "state.db"
    with raw(path) as conn:
        conn.execute("CREATE TABLE invoices(id INTEGER PRIMARY KEY)")
    before = path.read_bytes()
    line = assert_one_line_failure(hermes(hermes_env, "db", command), str(path), "invoices")
    assert "upgrade`" not in line  # never advises an upgrade that would be refused
    assert path.read_bytes() == before


@pytest.mark.parametrize("command", ["status", "upgrade"])
def test_newer_db_is_refused(hermes_env: dict[str, str], hermes_home: Path, command: str) -> None:
    path = hermes_home / "state.db"
    open_store(sqlite_url(path)).close()
    with raw(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    assert_one_line_failure(hermes(hermes_env, "db", command), "9999", "newer")
    assert stamped(path) == "9999"


@pytest.mark.parametrize("args", [("db", "status"), ("db", "upgrade"), ("sessions", "list")])
def test_non_sqlite_file_is_one_line(
    hermes_env: dict[str, str], hermes_home: Path, args: tuple[str, ...]
) -> None:
    path = hermes_home / "state.db"
    path.write_text("this is my shopping list\n")
    assert_one_line_failure(hermes(hermes_env, *args), str(path), "not a SQLite database")
    assert path.read_text() == "this is my shopping list\n"


def test_corrupt_db_is_one_line(hermes_env: dict[str, str], hermes_home: Path) -> None:
    path = hermes_home / "state.db"
    store = open_store(sqlite_url(path))
    with store.write() as conn:
        for i in range(30):
            sid = f"20240101_0000{i:02d}_abcdef"
            session_rows.create_session(conn, session_id=sid, source="cli", now=float(i))
            for _ in range(8):
                message_rows.append_message(conn, sid, "user", "filler " * 100, now=float(i))
    store.close()
    with raw(path) as conn:
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        root = int(
            conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'messages'").fetchone()[0]
        )
    with path.open("r+b") as handle:
        handle.seek((root - 1) * page_size)
        handle.write(b"\xde\xad" * (page_size // 2))
    assert_one_line_failure(hermes(hermes_env, "sessions", "list"), "corrupt")


def test_home_under_a_file_is_one_line(hermes_env: dict[str, str], tmp_path: Path) -> None:
    blocker = tmp_path / "plain-file"
    blocker.write_text("x")
    env = {**hermes_env, "HERMES_HOME": str(blocker / "hermes")}
    for args in (("db", "status"), ("sessions", "list")):
        assert_one_line_failure(hermes(env, *args), "plain-file")


def test_database_under_a_file_is_one_line(hermes_env: dict[str, str], tmp_path: Path) -> None:
    blocker = tmp_path / "plain-file"
    blocker.write_text("x")
    env = {**hermes_env, "HERMES_DATABASE_URL": f"sqlite:///{blocker}/state.db"}
    assert_one_line_failure(hermes(env, "db", "status"), "plain-file")


def test_bad_config_is_one_line_naming_the_key(
    hermes_env: dict[str, str], hermes_home: Path
) -> None:
    (hermes_home / "config.yaml").write_text("gateway:\n  port: many\n")
    assert_one_line_failure(hermes(hermes_env, "db", "status"), "gateway.port", "config.yaml")
    env = {**hermes_env, "HERMES_GATEWAY__PORT": "lots"}
    (hermes_home / "config.yaml").write_text("")
    assert_one_line_failure(hermes(env, "db", "status"), "HERMES_GATEWAY__PORT")


def test_invalid_yaml_is_one_line(hermes_env: dict[str, str], hermes_home: Path) -> None:
    (hermes_home / "config.yaml").write_text("gateway: {port: [\n")
    assert_one_line_failure(hermes(hermes_env, "db", "status"), "config.yaml", "YAML")


# --- the same commands through click's runner ---


def invoke(settings: Settings, *args: str) -> tuple[int, str, BaseException | None]:
    app = App(settings_loader=lambda: settings)
    try:
        result = CliRunner().invoke(cli, list(args), obj=app)
    finally:
        app.close()
    return result.exit_code, result.output, result.exception


def test_runner_status_and_upgrade(settings: Settings, hermes_home: Path) -> None:
    path = hermes_home / "state.db"
    old_db_with_data(path)
    code, output, _ = invoke(settings, "db", "status")
    assert code == 0
    assert f"schema {OLD}" in output
    code, output, _ = invoke(settings, "db", "upgrade")
    assert code == 0
    assert f"from schema {OLD} to {HEAD}" in output
    code, output, _ = invoke(settings, "db", "status")
    assert code == 0
    assert "up to date" in output
    assert_old_data_intact(path)


def test_runner_refuses_a_foreign_file(settings: Settings, hermes_home: Path) -> None:
    con = sqlite3.connect(hermes_home / "state.db")
    con.execute("CREATE TABLE t(x)")
    con.commit()
    con.close()
    code, _, error = invoke(settings, "db", "upgrade")
    assert code != 0
    assert isinstance(error, StoreError)
    assert "refusing" in str(error)


# --- status names the database, on both dialects ---


@pytest.mark.both_databases
def test_status_names_dialect_server_and_schema(
    hermes_env: dict[str, str], database_url: str | None, hermes_home: Path
) -> None:
    upgraded = hermes(hermes_env, "db", "upgrade")
    assert upgraded.returncode == 0, upgraded.stderr
    status = hermes(hermes_env, "db", "status")
    assert status.returncode == 0, status.stderr
    first, second = status.stdout.strip().splitlines()
    if database_url is None:
        assert (
            first == f"Database: SQLite {sqlite3.sqlite_version}, file {hermes_home / 'state.db'}"
        )
    else:
        schema = database_url.split("search_path%3D", 1)[1].split(",", 1)[0]
        assert first.startswith("Database: PostgreSQL 1"), first
        assert "at 127.0.0.1:5432" in first and f"schema {schema}" in first, first
        assert "password" not in first
    assert second.endswith(f": schema {HEAD} (newest {HEAD}), up to date"), second
