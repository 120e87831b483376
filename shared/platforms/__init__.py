"""The platforms and chat types hermes knows, by name; the gateway platforms come from the registry.

`CLI` (the terminal) and `CRON` (scheduled jobs) are built in. Every other platform is a plug-in:
a `Platform` descriptor (shared/platforms/descriptor.py) registered under the entry-point group
`hermes_fleet.platforms` (shared/platforms/registry.py). `GATEWAY_PLATFORMS` and `PLATFORMS` are
read from the registry on first use, never at import.
"""

from __future__ import annotations

from typing import Any

CLI = "cli"
TELEGRAM = "telegram"
SLACK = "slack"
DISCORD = "discord"
CRON = "cron"

BUILT_IN = frozenset({CLI, CRON})

DM = "dm"
GROUP = "group"
CHANNEL = "channel"
THREAD = "thread"

CHAT_TYPES = frozenset({DM, GROUP, CHANNEL, THREAD})


def gateway_platforms() -> frozenset[str]:
    """The registered platforms (sessions made through them get 8 hex digits in their id)."""
    from shared.platforms.registry import name_set

    return name_set()


# (the registry's name set it was made from, BUILT_IN with it): made again when that changes
_known: tuple[frozenset[str], frozenset[str]] | None = None


def known_platforms() -> frozenset[str]:
    """Every platform a turn may come from: the built-in ones and the registered ones.

    Every turn a receiver records is checked against it: the union is kept for as long as the
    registry's name set is the same object (shared/platforms/registry.py makes a new one when
    a platform is added or removed), not built again per turn."""
    global _known
    registered = gateway_platforms()
    found = _known
    if found is None or found[0] is not registered:
        found = _known = (registered, BUILT_IN | registered)
    return found[1]


def __getattr__(name: str) -> Any:
    # The old constants, derived from the registry when first asked for.
    if name == "GATEWAY_PLATFORMS":
        return gateway_platforms()
    if name == "PLATFORMS":
        return known_platforms()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
