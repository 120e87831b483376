"""Which libraries each platform needs where, and the one line that says how to get them."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from types import ModuleType

from shared.platforms import registry
from shared.sdks import RECEIVER, SENDER, missing_sdk, sdk_problems


def _without(*blocked: str) -> Callable[[str], ModuleType]:
    def importer(name: str) -> ModuleType:
        if name in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return ModuleType(name)

    return importer


def test_discord_replies_need_no_sdk_but_its_receiver_does() -> None:
    importer = _without("discord")
    assert missing_sdk("discord", [SENDER], importer) is None
    line = missing_sdk("discord", [RECEIVER], importer)
    assert line is not None and "'discord.py>=" in line


def test_slack_socket_mode_transport_is_the_receivers_alone() -> None:
    importer = _without("aiohttp")
    assert missing_sdk("slack", [SENDER], importer) is None
    line = missing_sdk("slack", [RECEIVER], importer)
    assert line is not None and "'aiohttp>=" in line and "slack_sdk" not in line.split(":", 1)[1]


def test_one_line_per_platform_with_this_pythons_pip_and_the_pinned_requirement() -> None:
    lines = sdk_problems(registry.names(), importer=_without("telegram", "discord"))
    assert len(lines) == 2
    assert lines[0].startswith("telegram is configured but its SDK does not import")
    assert f"{sys.executable} -m pip install 'python-telegram-bot>=22.0'" in lines[0]
    assert "platforms.telegram.enabled: false" in lines[0]
    assert lines[1].startswith("discord is configured")


def test_a_warning_while_importing_is_no_failure() -> None:
    """discord.py imports audioop, which warns on 3.11; under `-W error` that must not read
    as a missing SDK, nor escape."""

    def noisy(name: str) -> ModuleType:
        warnings.warn("audioop is deprecated", DeprecationWarning, stacklevel=1)
        return ModuleType(name)

    assert missing_sdk("discord", [RECEIVER], noisy) is None
