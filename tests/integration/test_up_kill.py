"""`kill -9` of `hermes up` (issue 21, item 8): its Redis, workers and beat stop with it, and
the next `hermes up` starts without anything killed by hand."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.test_up import ROOT, _alive, _hermes

ROLES = ("│ worker", "│ beat", "│ broker")


def start_up(env: dict[str, str]) -> tuple[subprocess.Popen[str], list[int]]:
    """`hermes up` and the pids of its roles, read off the table it prints at start."""
    up = subprocess.Popen(
        [sys.executable, "-m", "producers.cli.main", "up", "-w", "1", "-c", "2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    assert up.stdout is not None
    pids: list[int] = []
    seen: list[str] = []
    for line in up.stdout:
        seen.append(line)
        if line.startswith(ROLES):
            pids.append(int(line.split("│")[2].strip()))
        if line.startswith("Ctrl-C stops everything"):
            break
    assert len(pids) == 3, "".join(seen)
    return up, pids


def workers(env: dict[str, str]) -> list[object]:
    status = _hermes(env, "status", "--json")
    return list(json.loads(status.stdout).get("workers") or []) if status.returncode == 0 else []


def gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [pid for pid in pids if _alive(pid) and not _zombie(pid)]
        if not left:
            return []
        time.sleep(0.2)
    return left


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.timeout(180)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_up_takes_its_children_with_it_and_the_next_up_starts(
    hermes_env: dict[str, str], hermes_home: Path
) -> None:
    first, pids = start_up(hermes_env)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=10)
    assert first.stdout is not None
    first.stdout.close()
    assert gone(pids, timeout=60) == []
    second, _ = start_up(hermes_env)  # no "a broker is already running"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not workers(hermes_env):
        time.sleep(0.5)
    second.send_signal(signal.SIGINT)
    output, _ = second.communicate(timeout=60)
    assert second.returncode == 0, output
