"""A full disk is called a full disk (issue 21, item 14): state.db on a small tmpfs, filled up,
then a write through the real `hermes` command. Needs root to mount the tmpfs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.stack import ROOT

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def hermes(
    env: dict[str, str], home: Path, *args: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "producers.cli.main", *args],
        input=stdin,
        env={**env, "HERMES_HOME": str(home)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_write_on_a_full_disk_says_the_disk_is_full(
    small_disk: Path, hermes_env: dict[str, str]
) -> None:
    home = small_disk / "hermes"
    assert hermes(hermes_env, home, "sessions", "list").returncode == 0  # state.db made, ~250 KB
    filler = small_disk / "filler"
    # Take every free byte, unbuffered: a buffered file would try its leftover bytes again
    # on close and raise there (it did once the schema's size left an odd remainder).
    with filler.open("wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
        except OSError:
            pass
    line = {
        "id": "20250101_000000_abcdef",
        "source": "cli",
        "started_at": 1.7e9,
        "messages": [{"role": "user", "content": "x" * 200_000, "timestamp": 1.7e9}],
    }
    result = hermes(hermes_env, home, "sessions", "import", "-", stdin=json.dumps(line) + "\n")
    assert result.returncode != 0
    assert f"the disk holding {home} is full" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
