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
from importlib import metadata
from types import ModuleType

from shared.platforms import registry
from shared.platforms.descriptor import Platform, Sdk
from shared.settings import Settings

DISTRIBUTION = "hermes-fleet"

SENDER = "sender"  # what a worker imports to deliver replies
RECEIVER = "receiver"  # what `hermes gateway <platform>` imports

Importer = Callable[[str], ModuleType]

__all__ = ["RECEIVER", "SENDER", "Sdk", "configured_platforms", "missing_sdk", "sdk_problems"]


def _sdks(platform: Platform, role: str) -> tuple[Sdk, ...]:
    return platform.sender_sdks if role == SENDER else platform.receiver_sdks


def configured_platforms(settings: Settings) -> list[str]:
    """Platforms that are enabled and have a token: the ones workers deliver to."""
    return [name for name in registry.names() if settings.platforms.of(name).configured]


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
    described = registry.get(platform)
    return list(dict.fromkeys(sdk for role in roles for sdk in _sdks(described, role)))


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
