"""`hermes sessions search` and the 0002 → 0003 upgrade that builds the substring index."""

from __future__ import annotations

import json

import click
import pytest
from alembic import command
from click.testing import CliRunner
from sqlalchemy import text

from producers.cli.app import App
from producers.cli.search import search
from shared.db import open_store
from shared.db.engine import connect
from shared.db.migrate import HEAD, alembic_config
from shared.search import SearchRequest
from shared.search import search as run_search
from shared.search.postgresql import ddl as postgresql_ddl
from shared.settings import Settings
from shared.store.messages import append_message
from shared.store.sessions import create_session

pytestmark = pytest.mark.both_databases


# How many messages the substring index holds, per dialect.
INDEXED_CJK = {
    "sqlite": "SELECT count(*) FROM messages_cjk_docsize",
    "postgresql": f"SELECT count(*) FROM messages AS m WHERE {postgresql_ddl.unsegmented()}",
}


def _fill(settings: Settings) -> None:
    store = open_store(settings.resolved_database_url)
    try:
        with store.write() as conn:
            create_session(conn, session_id="s1", source="cli", now=1.0, title="ingress work")
            append_message(conn, "s1", "user", "the ingress timeout again", now=2.0)
            append_message(conn, "s1", "assistant", "raise proxy_read_timeout", now=3.0)
            create_session(conn, session_id="s2", source="telegram", now=4.0)
            append_message(conn, "s2", "user", "ingress 配置 问题", now=5.0)
    finally:
        store.close()


def _invoke(settings: Settings, *args: str) -> tuple[int, str, str]:
    group = click.Group("sessions", commands={"search": search})
    app = App(settings_loader=lambda: settings)
    try:
        result = CliRunner().invoke(group, ["search", *args], obj=app)
    finally:
        app.close()
    return result.exit_code, result.stdout, result.stderr


def test_people_get_titles_snippets_and_windows(settings: Settings) -> None:
    _fill(settings)
    code, out, _ = _invoke(settings, "ingress", "timeout")
    assert code == 0
    assert "ingress work" in out and "s1" in out and "proxy_read_timeout" in out
    assert "⟦" not in out  # marks become styling


def test_json_for_scripts(settings: Settings) -> None:
    _fill(settings)
    code, out, _ = _invoke(settings, "ingress", "--json", "--limit", "5", "--sort", "newest")
    assert code == 0
    result = json.loads(out)
    assert [r["session_id"] for r in result["results"]] == ["s2", "s1"]
    code, out, _ = _invoke(settings, "ingress", "--json", "--source", "cli")
    assert [r["session_id"] for r in json.loads(out)["results"]] == ["s1"]
    code, out, _ = _invoke(settings, "配置", "--json")
    assert [r["session_id"] for r in json.loads(out)["results"]] == ["s2"]


def test_bad_queries_exit_non_zero_with_one_line(settings: Settings) -> None:
    _fill(settings)
    code, _, err = _invoke(settings, "*")
    assert code == 1 and err.count("\n") == 1 and "nothing searchable" in err
    code, out, _ = _invoke(settings, "NOT", "x", "--json")
    assert code == 1 and "error" in json.loads(out)
    code, _, err = _invoke(settings, "x", "--role", "robot")
    assert code == 1 and "role_filter" in err


def test_no_match_says_so(settings: Settings) -> None:
    _fill(settings)
    code, out, _ = _invoke(settings, "zebra")
    assert code == 0 and "No matches" in out


def test_upgrade_from_0002_indexes_existing_cjk_messages(settings: Settings) -> None:
    url = settings.resolved_database_url
    old = connect(url)
    try:
        with old.write() as conn:
            command.upgrade(alembic_config(conn), "0002")
        with old.write() as conn:
            create_session(conn, session_id="old", source="cli", now=1.0)
            append_message(conn, "old", "user", "以前的中文消息", now=2.0)
            append_message(conn, "old", "user", "english only", now=3.0)
    finally:
        old.close()
    store = open_store(url)
    try:
        with store.read() as conn:
            rev = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
            indexed = conn.execute(text(INDEXED_CJK[store.dialect])).scalar()
        assert rev == HEAD and indexed == 1
        result = run_search(store, SearchRequest(query="中文"))
        assert [r["session_id"] for r in result["results"]] == ["old"]
    finally:
        store.close()


def test_window_defaults_to_the_tool_shape(settings: Settings) -> None:
    store = open_store(settings.resolved_database_url)
    try:
        with store.write() as conn:
            create_session(conn, session_id="long", source="cli", now=1.0)
            mids = [
                append_message(conn, "long", ("user", "assistant")[i % 2], text, now=2.0 + i)
                for i, text in enumerate(
                    [f"filler {i}" if i != 10 else "the pelican spot" for i in range(21)]
                )
            ]
    finally:
        store.close()
    code, out, _ = _invoke(settings, "pelican", "--json")
    assert code == 0
    [hit] = json.loads(out)["results"]
    assert [m["id"] for m in hit["messages"]] == mids[5:16]  # DEFAULT_WINDOW (5) each side
    code, out, _ = _invoke(settings, "pelican", "--json", "--window", "1")
    assert [m["id"] for m in json.loads(out)["results"][0]["messages"]] == mids[9:12]
