"""A newcomer's platform setup: the SDKs come with the package, and a configured platform whose
SDK does not import is refused once at start (with the command that fixes it) — while terminal
turns keep working. The missing SDK is simulated with tests/shims/no_sdk (an import blocker on
PYTHONPATH), so nothing is uninstalled from the test venv."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from tests.fakes.stack import ROOT

SHIM = ROOT / "tests" / "shims" / "no_sdk"
TG_TOKEN = "123456789:AAFakeTokenForTheSdkTests"


def _without(env: dict[str, str], *modules: str) -> dict[str, str]:
    return {
        **env,
        "PYTHONPATH": f"{SHIM}:{ROOT}",
        "BLOCK_IMPORTS": ",".join(modules),
        "HERMES_PLATFORMS__TELEGRAM__TOKEN": TG_TOKEN,
    }


def _hermes(
    env: dict[str, str], *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "producers.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def test_the_platform_sdks_are_ordinary_dependencies() -> None:
    """README's one `pip install -e .` brings every platform we ship; the extras stay as
    aliases (`pip install 'hermes-fleet[telegram]'` still works)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(requirements: list[str]) -> set[str]:
        return {
            re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0].lower().replace("_", "-")
            for r in requirements
        }

    plain = names(project["dependencies"])
    assert {"python-telegram-bot", "slack-sdk", "aiohttp", "discord.py"} <= plain
    extras = project["optional-dependencies"]
    assert names(extras["telegram"]) == {"python-telegram-bot"}
    assert names(extras["slack"]) == {"slack-sdk", "aiohttp"}
    assert names(extras["discord"]) == {"discord.py"}
    installed = {
        re.split(r"[<>=!~\[ ;]", line, maxsplit=1)[0].lower().replace("_", "-")
        for line in metadata.requires("hermes-fleet") or []
        if "extra ==" not in line
    }
    assert plain <= installed, "reinstall: pip install -e '.[dev]'"


def test_the_shim_really_blocks_the_import(hermes_env: dict[str, str]) -> None:
    probe = subprocess.run(
        [sys.executable, "-c", "import telegram"],
        env=_without(hermes_env, "telegram"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.returncode == 1 and "No module named 'telegram'" in probe.stderr


@pytest.mark.parametrize(
    ("args", "prefix"),
    [
        (("worker", "-c", "1"), "hermes worker: "),
        (("gateway", "telegram", "--polling"), "Error: "),
        (("up", "-w", "1", "--no-beat"), "hermes up: "),
    ],
    ids=["worker", "gateway", "up"],
)
def test_each_role_refuses_once_at_start_with_the_install_command(
    hermes_env: dict[str, str], hermes_home: Path, args: tuple[str, ...], prefix: str
) -> None:
    result = _hermes(_without(hermes_env, "telegram"), *args)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"{prefix}telegram is configured but its SDK does not import")
    assert f"{sys.executable} -m pip install 'python-telegram-bot>=" in lines[0]
    assert "platforms.telegram.enabled: false" in lines[0]
    assert TG_TOKEN not in result.stdout + result.stderr
    assert not (hermes_home / "run" / "redis.sock").exists(), "up started nothing"


@pytest.mark.timeout(180)
def test_a_terminal_turn_is_answered_when_a_platform_sdk_is_missing(
    hermes_env: dict[str, str], hermes_home: Path
) -> None:
    """Before: the chat's worker failed every task on `import telegram` and `chat -q` waited for
    its whole timeout. Now the chat says once what is missing and the reply comes."""
    result = _hermes(
        _without(hermes_env, "telegram"),
        "chat",
        "-q",
        "hello there",
        "--timeout",
        "60",
        timeout=150,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith("echo: hello there\n")
    notices = [line for line in result.stderr.splitlines() if "SDK does not import" in line]
    assert len(notices) == 1, result.stderr
    assert "Terminal chats work without it." in notices[0]
    log = (hermes_home / "run" / "chat-worker.log").read_text()
    assert log.count("telegram is configured but its SDK does not import") == 1, log
    assert "Traceback" not in log, log
