"""Helpers shared by the `hermes sessions` tests: seeding a store, CliRunner and the real script.

Holds no tests itself; the other test_cli_sessions*.py modules import from it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result
from sqlalchemy import func, select

from producers.cli.app import App
from producers.cli.main import cli
from shared.db import Store
from shared.db.schema import messages, sessions
from shared.settings import Settings
from shared.store.messages import append_message
from shared.store.sessions import create_session, end_session
from shared.titles import TitleSource

# 2025-06-15 14:13:20 UTC: every CLI test runs at this instant.
NOW = 1_750_000_000.0
DAY = 86_400.0
HERMES = Path(sys.executable).parent / "hermes"


@dataclass
class Msg:
    role: str
    content: str | None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    token_count: int | None = None
    platform_message_id: str | None = None


@dataclass
class Seed:
    id: str
    source: str = "cli"
    started: float = NOW - 3600
    title: str | None = None
    title_source: TitleSource = TitleSource.USER
    messages: Sequence[Msg] = field(default_factory=lambda: [Msg("user", "hello")])
    ended: float | None = None
    parent: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def seed(store: Store, *items: Seed) -> None:
    """Create sessions with their messages, one second apart from their start."""
    with store.write() as conn:
        for item in items:
            columns = dict(item.extra)
            if item.parent:
                columns["parent_session_id"] = item.parent
            create_session(
                conn,
                session_id=item.id,
                source=item.source,
                now=item.started,
                title=item.title,
                title_source=item.title_source,
                **columns,
            )
            for offset, message in enumerate(item.messages, 1):
                append_message(
                    conn,
                    item.id,
                    message.role,
                    message.content,
                    now=item.started + offset,
                    tool_calls=message.tool_calls,
                    tool_call_id=message.tool_call_id,
                    tool_name=message.tool_name,
                    token_count=message.token_count,
                    platform_message_id=message.platform_message_id,
                )
            if item.ended is not None:
                end_session(conn, item.id, "test", item.ended)


def invoke(
    settings: Settings, args: Sequence[str], *, input: str | bytes | None = None, now: float = NOW
) -> Result:
    """Run `hermes ARGS` in-process through click, with a fixed clock."""
    app = App(settings_loader=lambda: settings, clock=lambda: now)
    try:
        return CliRunner().invoke(cli, list(args), obj=app, input=input)
    finally:
        app.close()


def hermes(
    env: dict[str, str], *args: str, input: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run the real `hermes` console script (stdin, stdout and stderr are pipes)."""
    assert HERMES.exists(), f"the hermes console script is not installed next to {sys.executable}"
    return subprocess.run(
        [str(HERMES), *args],
        env=env,
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def elsewhere(hermes_env: dict[str, str], home: Path) -> dict[str, str]:
    """The environment of a second, empty store: a state.db in `home` (whatever database the
    test runs on, so an export from PostgreSQL is read back into SQLite too)."""
    return {
        **{k: v for k, v in hermes_env.items() if k != "HERMES_DATABASE_URL"},
        "HERMES_HOME": str(home),
    }


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def without_message_ids(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {**doc, "messages": [{k: v for k, v in m.items() if k != "id"} for m in doc["messages"]]}
        for doc in docs
    ]


def session_ids(store: Store) -> list[str]:
    with store.read() as conn:
        return list(conn.execute(select(sessions.c.id).order_by(sessions.c.id)).scalars())


def message_total(store: Store) -> int:
    with store.read() as conn:
        return int(conn.execute(select(func.count()).select_from(messages)).scalar_one())


def good(session_id: str, **extra: Any) -> str:
    """One valid `sessions import` line: a cli session with one user message."""
    doc = {
        "id": session_id,
        "source": "cli",
        "started_at": NOW,
        "messages": [{"role": "user", "content": f"hi from {session_id}", "timestamp": NOW}],
        **extra,
    }
    return json.dumps(doc, ensure_ascii=False)
