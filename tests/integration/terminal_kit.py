"""The real `hermes` console script for tests: in a pty (pexpect) or as a subprocess, on the
test's own HERMES_HOME; fixtures that stop whatever a failed test left running."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import pexpect
import pytest

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|[\x08\r]")
SESSION_ID = re.compile(r"Session (\d{8}_\d{6}_[0-9a-f]{6})\b")
PROMPT = "●"


def hermes_bin() -> str:
    beside = Path(sys.executable).with_name("hermes")
    found = str(beside) if beside.exists() else shutil.which("hermes")
    assert found, "the hermes console script is installed with the package"
    return found


class Terminal:
    """One `hermes` process in a 50x200 pty; `text()` is what it printed, without ANSI codes."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.log = StringIO()
        self.child = pexpect.spawn(
            hermes_bin(), list(args), env=env, encoding="utf-8", timeout=60, dimensions=(50, 200)
        )
        self.child.logfile_read = self.log

    def ready(self) -> Terminal:
        self.child.expect("Type a message")
        self.child.expect(PROMPT)
        return self

    def say(self, line: str, *, expect: str) -> None:
        self.child.sendline(line)
        self.child.expect(re.escape(expect))
        self.child.expect(PROMPT)

    def leave(self) -> str:
        self.child.sendcontrol("d")
        self.child.expect(pexpect.EOF)
        self.child.close()
        assert self.child.exitstatus == 0, self.text()
        return self.text()

    def text(self) -> str:
        return ANSI.sub("", self.log.getvalue())

    def kill(self) -> None:
        if self.child.isalive():
            self.child.sendcontrol("d")
            try:
                self.child.expect(pexpect.EOF, timeout=30)
            except pexpect.TIMEOUT:
                self.child.close(force=True)


@pytest.fixture
def term_env(hermes_env: dict[str, str]) -> dict[str, str]:
    # prompt_toolkit asks the terminal where its cursor is; a pty under test never answers.
    return {**hermes_env, "TERM": "xterm-256color", "PROMPT_TOOLKIT_NO_CPR": "1"}


@pytest.fixture
def terminals(term_env: dict[str, str], hermes_home: Path) -> Iterator[list[Terminal]]:
    opened: list[Terminal] = []
    yield opened
    for terminal in opened:
        terminal.kill()
    record = hermes_home / "run" / "chat-stack.json"
    leftover = json.loads(record.read_text()) if record.exists() else None
    if leftover:  # a failed test must not leave the processes it started
        for pid in (leftover.get("worker"), leftover.get("redis")):
            subprocess.run(["kill", str(pid)], check=False, capture_output=True)
    assert leftover is None, "the chat left its embedded stack running"
    assert not (hermes_home / "run" / "redis.sock").exists()


def start(terminals: list[Terminal], env: dict[str, str], *args: str) -> Terminal:
    terminal = Terminal(env, *args)
    terminals.append(terminal)
    return terminal


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [hermes_bin(), *args], env=env, capture_output=True, text=True, timeout=120
    )
