"""Which library each platform's receiver and sender need, and the refusal when one is missing.

The SDKs are ordinary dependencies of hermes-fleet, so a normal install has them all; a broken
or trimmed install must still fail once, at start, naming the exact command that fixes it —
never per task. This module only asks whether a module imports (`importlib`); it never uses an
SDK, so `shared` stays free of them.
"""

from __future__ import annotations

import importlib
import re
import shlex
import sys
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from types import ModuleType

from shared.platforms import DISCORD, SLACK, TELEGRAM
from shared.settings import Settings

DISTRIBUTION = "hermes-fleet"


@dataclass(frozen=True, slots=True)
class Sdk:
    module: str  # what `import` needs
    requirement: str  # what pip installs (the name as pyproject.toml spells it)


TELEGRAM_BOT = Sdk("telegram", "python-telegram-bot")
SLACK_SDK = Sdk("slack_sdk", "slack_sdk")
AIOHTTP = Sdk("aiohttp", "aiohttp")  # Slack Socket Mode's transport
DISCORD_PY = Sdk("discord", "discord.py")

SENDER = "sender"  # what a worker imports to deliver replies
RECEIVER = "receiver"  # what `hermes gateway <platform>` imports
SDKS: dict[str, dict[str, tuple[Sdk, ...]]] = {
    SENDER: {
        TELEGRAM: (TELEGRAM_BOT,),
        SLACK: (SLACK_SDK,),
        DISCORD: (),  # replies go over Discord's REST API with httpx
    },
    RECEIVER: {
        TELEGRAM: (TELEGRAM_BOT,),
        SLACK: (SLACK_SDK, AIOHTTP),
        DISCORD: (DISCORD_PY,),
    },
}

Importer = Callable[[str], ModuleType]


def configured_platforms(settings: Settings) -> list[str]:
    """Platforms that are enabled and have a token: the ones workers deliver to."""
    return [
        name
        for name in SDKS[RECEIVER]
        if getattr(settings.platforms, name).enabled
        and getattr(settings.platforms, name).token is not None
    ]


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned(requirement: str) -> str:
    """`requirement` with the lower bound hermes-fleet declares (`python-telegram-bot>=22.0`)."""
    try:
        declared = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return requirement
    for line in declared:
        spec = line.split(";", 1)[0].strip()
        name = re.split(r"[\s<>=!~\[(]", spec, maxsplit=1)[0]
        if _normal(name) == _normal(requirement):
            return spec.replace(" ", "")
    return requirement


def install_command(sdks: Iterable[Sdk]) -> str:
    """The exact command that installs `sdks` into the Python running hermes."""
    names = " ".join(shlex.quote(pinned(sdk.requirement)) for sdk in sdks)
    return f"{shlex.quote(sys.executable)} -m pip install {names}"


def _imports(module: str, importer: Importer) -> str | None:
    """None when `module` imports; else why not. Warnings an SDK raises while importing (a
    deprecated stdlib module, say) are not our concern here and must not read as failures."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            importer(module)
    except ImportError as exc:
        return str(exc) or f"No module named {module!r}"
    return None


def needed(platform: str, roles: Iterable[str]) -> list[Sdk]:
    """The libraries `platform` needs in `roles`, each once, in order."""
    return list(dict.fromkeys(sdk for role in roles for sdk in SDKS[role][platform]))


def missing_sdk(
    platform: str,
    roles: Iterable[str] = (SENDER, RECEIVER),
    importer: Importer = importlib.import_module,
) -> str | None:
    """None when `platform`'s libraries for `roles` import; else one line saying what to run."""
    missing: list[Sdk] = []
    reasons: list[str] = []
    for sdk in needed(platform, roles):
        reason = _imports(sdk.module, importer)
        if reason is not None:
            missing.append(sdk)
            reasons.append(reason)
    if not missing:
        return None
    return (
        f"{platform} is configured but its SDK does not import ({'; '.join(reasons)}). "
        f"Install it: {install_command(missing)} "
        f"(the {DISTRIBUTION}[{platform}] extra), "
        f"or turn the platform off (platforms.{platform}.enabled: false)."
    )


def sdk_problems(
    platforms: Iterable[str],
    roles: Iterable[str] = (SENDER, RECEIVER),
    importer: Importer = importlib.import_module,
) -> list[str]:
    """One line per platform in `platforms` whose libraries for `roles` do not import."""
    wanted = tuple(roles)
    return [line for name in platforms if (line := missing_sdk(name, wanted, importer)) is not None]
