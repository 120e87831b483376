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


# Per platform: what its sender and receivers import. aiohttp is Slack Socket Mode's transport.
SDKS: dict[str, tuple[Sdk, ...]] = {
    TELEGRAM: (Sdk("telegram", "python-telegram-bot"),),
    SLACK: (Sdk("slack_sdk", "slack_sdk"), Sdk("aiohttp", "aiohttp")),
    DISCORD: (Sdk("discord", "discord.py"),),
}

Importer = Callable[[str], ModuleType]


def configured_platforms(settings: Settings) -> list[str]:
    """Platforms that are enabled and have a token: the ones workers deliver to."""
    return [
        name
        for name in SDKS
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


def missing_sdk(platform: str, importer: Importer = importlib.import_module) -> str | None:
    """None when `platform`'s libraries import; else one line saying what to run."""
    missing: list[Sdk] = []
    reasons: list[str] = []
    for sdk in SDKS[platform]:
        try:
            importer(sdk.module)
        except ImportError as exc:
            missing.append(sdk)
            reasons.append(str(exc) or f"No module named {sdk.module!r}")
    if not missing:
        return None
    return (
        f"{platform} is configured but its SDK does not import ({'; '.join(reasons)}). "
        f"Install it: {install_command(missing)} "
        f"(the {DISTRIBUTION}[{platform}] extra), "
        f"or turn the platform off (platforms.{platform}.enabled: false)."
    )


def sdk_problems(
    platforms: Iterable[str], importer: Importer = importlib.import_module
) -> list[str]:
    """One line per platform in `platforms` whose libraries do not import."""
    return [line for name in platforms if (line := missing_sdk(name, importer)) is not None]
